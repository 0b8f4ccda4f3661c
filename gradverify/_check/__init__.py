"""_check"""

__all__ = []
