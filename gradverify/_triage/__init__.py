"""_triage"""

__all__ = []
