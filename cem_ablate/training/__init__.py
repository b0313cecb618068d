"""Training one run: recipe (docs/design/experiments.md#s7-training-recipe), Lightning modules, Trainer factory, budgets, engine."""
