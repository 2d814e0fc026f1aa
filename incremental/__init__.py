"""reopt.incremental — see README."""
