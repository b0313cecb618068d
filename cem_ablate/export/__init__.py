"""`cem-ablate export`: a trained run as a Hugging Face model directory (hf_directory.py),
on the platform's own source copied in (source_bundle.py)."""
