"""The boundary of a check: the caller's arguments and output as the core's
flat, dense, real arrays, through views in one declared order (``base``
declares a view; ``sparse``, ``held`` and ``complex`` are the views)."""

__all__: list[str] = []
