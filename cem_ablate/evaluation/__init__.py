"""`cem-ablate eval`: lm-evaluation-harness on an exported run (harness.py); the platform's own
scoring of strings (scoring.py)."""
