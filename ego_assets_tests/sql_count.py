"""Count the SQL statements Dagster's instance storage sends, to prove a path O(new)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import event
from sqlalchemy.engine import Engine


@contextlib.contextmanager
def sql_statements() -> Iterator[list[str]]:
    """Every statement any SQLAlchemy engine executes inside the block, in order."""
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", record)
