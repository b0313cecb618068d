"""MLflow for studies: one experiment per study, a parent run per variant, a nested
child run per trial. The only package of cem-ablate that talks to MLflow for studies
(the training engine logs a run's curves into the child run it is handed)."""
