"""Training one run: recipe (SPEC §7), Lightning modules, Trainer factory, budgets, engine."""
