"""_sweep"""

__all__ = []
