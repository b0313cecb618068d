"""Data for training runs: text corpora (offline default: the Python stdlib), GP, MQAR."""
