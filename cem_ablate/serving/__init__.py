"""After training: load a run's model and tokenizer, generate with the decoding cache."""
