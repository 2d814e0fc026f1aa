"""Procedural reference optimizers (top-down, bottom-up, exhaustive).

They exist to check and to benchmark the declarative optimizer; all three search the space
defined by :class:`reopt.costmodel.space.PlanSpace` and cost plans with the same functions.
"""
