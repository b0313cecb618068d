"""The layer zoo: one module per component family; importing this package registers them all."""
