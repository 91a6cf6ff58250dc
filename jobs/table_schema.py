"""
An output table's columns declared once, each with its Arrow type and its description: `described_schema` gives
the schema the table is written with and the descriptions the generated reference (docs/reference/tables.md) shows.
"""

from collections.abc import Iterable

import pyarrow as pa

Column = tuple[str, pa.DataType, str]  # (name, Arrow type, what the column holds, for a user reading the table)


def described_schema(columns: Iterable[Column]) -> tuple[pa.Schema, dict[str, str]]:
    """The Arrow schema of `columns` and each column's description, by name."""
    columns = list(columns)
    return pa.schema([(name, kind) for name, kind, _ in columns]), {name: text for name, _, text in columns}


__all__ = ["Column", "described_schema"]
