"""Statistics, cardinality estimation, cost models and the built-in functions the rules call.

Everything an optimizer needs to know about a query lives here, so the declarative optimizer
and the procedural reference optimizers cost plans with literally the same functions.
"""
