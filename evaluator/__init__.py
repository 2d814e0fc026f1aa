"""reopt.evaluator — see README."""
