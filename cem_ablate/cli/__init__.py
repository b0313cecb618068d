"""The `cem-ablate` command line. Each subcommand lives in its own module."""
