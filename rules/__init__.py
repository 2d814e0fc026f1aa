"""reopt.rules — see README."""
