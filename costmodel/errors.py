"""Errors that reach the user as one clear line (the CLI prints ``reopt: <message>``, exits 2)."""


class ReoptError(Exception):
    """Base class: bad input named precisely; never a corrupted state."""


class CatalogError(ReoptError):
    """A catalog file or statistic is malformed (names the file, table and column)."""


class QueryError(ReoptError):
    """A query uses an unsupported construct or an unknown/ambiguous name (names the position)."""


class DeltaError(ReoptError):
    """A cost delta is malformed or names nothing in the query; the state is left unchanged."""


class OptimizerError(ReoptError):
    """An optimizer cannot handle the request (e.g. exhaustive search over too many trees)."""
