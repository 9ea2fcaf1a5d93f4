"""Importing `t5forge.tasks` registers the built-in tasks (see t5forge.tasks.builtin)."""

from t5forge.tasks.builtin import register_builtin_tasks

register_builtin_tasks()

__all__ = ["register_builtin_tasks"]
