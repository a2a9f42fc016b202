"""The hot statements, compiled once per dialect and run on the DBAPI cursor: ``RawReads`` (a read on a pooled
connection of its own) and ``execute``/``executemany`` (a statement in a Core transaction's connection).

SQLAlchemy Core's execute path (a ``Connection`` per read, the compiled-cache lookup, bind and result processing,
``Row`` objects) cost ~80 us of a ~100 us ``find_cluster`` on SQLite; the same statement on the pool's DBAPI
connection costs ~20 us. The statements stay SQLAlchemy Core (``store.sql`` builds them), only their execution is
direct: the columns read are strings, integers and floats, which the DBAPI returns as Core would. A DBAPI error
is raised as SQLAlchemy's own exception (as Core would), and a connection the error broke leaves the pool.

An ``IN`` over a list is not compiled as such (Core renders it per execution, one placeholder per value): a
statement built with ``in_binds(size)`` has ``size`` placeholders, and ``in_chunks`` splits the values into chunks of
a few fixed sizes (``IN_SIZES``), the last one padded with its last value (a duplicate changes no ``IN``): each size
compiles once.

An INSERT is compiled for exactly the columns given (every column a record's mapper writes): a column left to a
Python-side default would need Core's execution context, and is refused when compiling.

On PostgreSQL a read runs in autocommit (one round trip, as ``engine.reads`` gives Core's reads): the connection is
switched to autocommit for the statement and back before it returns to the pool (psycopg does neither over the
wire while no transaction is open).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, bindparam
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

__all__ = ["IN_SIZES", "Compiled", "RawReads", "Result", "execute", "executemany", "in_binds", "in_chunks",
           "update_rows"]

#: the sizes of an ``IN (...)`` list a statement is compiled for (``in_chunks``); the largest is also the chunk size
IN_SIZES = (1, 4, 16, 64, 256)


def in_binds(size: int, prefix: str = "k_in") -> list[BindParameter[Any]]:
    """``size`` bind parameters for ``column.in_(...)``: ``prefix0`` .. ``prefix{size-1}``."""
    return [bindparam(f"{prefix}{i}") for i in range(size)]


def in_chunks(values: Sequence[Any], prefix: str = "k_in") -> Iterator[tuple[int, dict[str, Any]]]:
    """``values`` as (size, parameters of ``in_binds(size, prefix)``) chunks, ``size`` from ``IN_SIZES``; the last
    chunk repeats its last value up to its size. Nothing for no values."""
    top = IN_SIZES[-1]
    for start in range(0, len(values), top):
        chunk = list(values[start:start + top])
        size = next(n for n in IN_SIZES if n >= len(chunk))
        chunk.extend([chunk[-1]] * (size - len(chunk)))
        yield size, {f"{prefix}{i}": v for i, v in enumerate(chunk)}


class Compiled:
    """One statement's SQL text in a dialect's own parameter style, and the order of its positional parameters."""

    __slots__ = ("sql", "_order", "_fixed")

    def __init__(self, dialect: Dialect, statement: ClauseElement, column_keys: Sequence[str] | None = None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(column_keys) if column_keys else None)
        assert isinstance(compiled, SQLCompiler)  # a statement's compiler  # noqa: S101
        self.sql: str = compiled.string
        if "POSTCOMPILE" in self.sql:  # an IN over a list is rendered per execution: Core's job
            raise ValueError("a statement with IN (...) over a list runs through Core")
        self._order: tuple[str, ...] | None = tuple(compiled.positiontup or ()) if compiled.positional else None
        # the statement's own values (a literal in a WHERE clause becomes a bind parameter with its value)
        self._fixed = {name: b.effective_value for name, b in compiled.binds.items() if not b.required}
        defaulted = [name for name, b in compiled.binds.items() if not b.required and b.value is None]
        if defaulted:
            raise ValueError(f"give every column ({', '.join(defaulted)}): Python-side defaults need Core")

    @classmethod
    def of_text(cls, sql: str) -> Compiled:
        """A statement already in the dialect's text, with named parameters (``%(name)s`` on psycopg)."""
        q = cls.__new__(cls)
        q.sql, q._order, q._fixed = sql, None, {}
        return q

    def args(self, params: Mapping[str, Any]) -> Any:
        if self._fixed:
            params = {**self._fixed, **params}
        return params if self._order is None else tuple(params[k] for k in self._order)


class RawReads:
    """Reads on a pooled connection of their own; ``rows`` returns plain tuples, in the statement's column order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._autocommit = engine.dialect.name == "postgresql"

    def rows(self, statement: ClauseElement, params: Mapping[str, Any]) -> Sequence[tuple[Any, ...]]:
        dialect = self.engine.dialect
        q = _compiled(dialect, statement, None)
        args = q.args(params)
        fairy = self.engine.raw_connection()  # the pool's checkout (its idle ping included) and, on close, its reset
        try:
            dbapi = fairy.dbapi_connection
            assert dbapi is not None  # a checked-out connection has one  # noqa: S101
            try:
                if self._autocommit:
                    dbapi.autocommit = True
                rows = _on_cursor(dbapi, dialect, q, [args], many=False).rows
                if self._autocommit:
                    dbapi.autocommit = False
            except DBAPIError as err:
                broken = bool(getattr(dbapi, "broken", False) or getattr(dbapi, "closed", False))
                if broken or self._autocommit:  # (a PostgreSQL connection left in autocommit is not reused)
                    fairy.invalidate(err)
                raise
            return rows
        finally:
            fairy.close()

    def first(self, statement: ClauseElement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        rows = self.rows(statement, params)
        return rows[0] if rows else None

    def batch(self, reads: Sequence[tuple[ClauseElement, Mapping[str, Any]]]) -> list[Sequence[tuple[Any, ...]]]:
        """The rows of each of ``reads`` (statement, params), on one pooled connection: on PostgreSQL sent as one
        pipeline (one round trip, and one wait for the server, instead of one per read); on SQLite one after the
        other (one checkout instead of one per read)."""
        dialect = self.engine.dialect
        queries = [(q, q.args(params)) for q, params in ((_compiled(dialect, st, None), p) for st, p in reads)]
        fairy = self.engine.raw_connection()
        try:
            dbapi = fairy.dbapi_connection
            assert dbapi is not None  # a checked-out connection has one  # noqa: S101
            if not self._autocommit:
                return [_on_cursor(dbapi, dialect, q, [args], many=False).rows for q, args in queries]
            error = dialect.loaded_dbapi.Error
            q = queries[0][0]
            try:
                dbapi.autocommit = True
                cursors = []
                with dbapi.pipeline():
                    for q, args in queries:
                        cursor = dbapi.cursor()
                        cursors.append(cursor)
                        cursor.execute(q.sql, args)
                rows = [cursor.fetchall() for cursor in cursors]
                for cursor in cursors:
                    cursor.close()
                dbapi.autocommit = False
                return rows
            except error as err:
                fairy.invalidate(err)  # (a PostgreSQL connection left in autocommit is not reused)
                raise DBAPIError.instance(q.sql, None, err, error, dialect=dialect) from err
        finally:
            fairy.close()


class Result:
    """What ``execute`` read: the rows (a SELECT's) and the count of rows changed (an UPDATE's or DELETE's)."""

    __slots__ = ("rows", "rowcount")

    def __init__(self, rows: Sequence[tuple[Any, ...]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


# (dialect name, driver, statement, insert columns) -> its SQL; statements are module-level constants, so this holds
# a handful of entries per dialect (a statement hashes by identity)
_COMPILED: dict[tuple[Any, ...], Compiled] = {}


def _compiled(dialect: Dialect, statement: ClauseElement, column_keys: tuple[str, ...] | None) -> Compiled:
    key = (dialect.name, dialect.driver, statement, column_keys)
    q = _COMPILED.get(key)
    if q is None:
        q = _COMPILED[key] = Compiled(dialect, statement, column_keys)
    return q


def execute(conn: Connection, statement: ClauseElement, params: Mapping[str, Any], *,
            insert: bool = False) -> Result:
    """``statement`` with ``params`` in ``conn``'s transaction, on its DBAPI cursor (``insert``: compiled for the
    columns of ``params``). A DBAPI error is raised as SQLAlchemy's (``IntegrityError`` for a duplicate key)."""
    q = _compiled(conn.dialect, statement, tuple(params) if insert else None)
    return _run(conn, q, [q.args(params)], many=False)


def executemany(conn: Connection, statement: ClauseElement, params: Sequence[Mapping[str, Any]], *,
                insert: bool = False) -> None:
    """``execute`` for each of ``params`` (one DBAPI ``executemany``; ``insert``: all with the first's columns).
    On PostgreSQL an INSERT of several rows is one ``INSERT ... SELECT * FROM unnest(<one array per column>)``:
    psycopg's ``executemany`` sends and converts each row as a statement of its own, and a multi-row ``VALUES``
    statement is too long for psycopg's parse cache (4 KiB, 50 parameters), so it is parsed anew each time."""
    if not params:
        return
    if insert and len(params) > 1 and conn.dialect.name == "postgresql":
        columns = tuple(params[0])
        q = _unnest_insert(conn.dialect, statement, columns)
        _run(conn, q, [{c: [row[c] for row in params] for c in columns}], many=False)
        return
    q = _compiled(conn.dialect, statement, tuple(params[0]) if insert else None)
    _run(conn, q, [q.args(p) for p in params], many=len(params) > 1)  # (psycopg's executemany: a pipeline)


# (INSERT statement, columns) -> its unnest form on PostgreSQL (``executemany``)
_UNNEST: dict[tuple[Any, ...], Compiled] = {}


def _unnest_insert(dialect: Dialect, statement: ClauseElement, columns: tuple[str, ...]) -> Compiled:
    key = (statement, columns)
    q = _UNNEST.get(key)
    if q is None:
        table = statement.table  # type: ignore[attr-defined]
        quote = dialect.identifier_preparer.quote
        arrays = _arrays(dialect, {c: table.c[c] for c in columns})
        q = _UNNEST[key] = Compiled.of_text(
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT * FROM unnest({arrays})")
    return q


def _arrays(dialect: Dialect, params: Mapping[str, Any]) -> str:
    """``unnest``'s arguments: each parameter (a list) cast to an array of its column's type."""
    return ", ".join(f"CAST(%({p})s AS {column.type.compile(dialect=dialect)}[])" for p, column in params.items())


def update_rows(conn: Connection, table: Any, key: str, version: str, rows: Sequence[Mapping[str, Any]]
                ) -> set[Any]:
    """PostgreSQL: version-checked UPDATEs of several rows of ``table`` in one statement (``UPDATE ... FROM
    unnest(<one array per column>)``); each of ``rows`` holds every column to set plus ``k_key`` (the row's ``key``)
    and ``k_version`` (its stored ``version``, which must still match). Returns the keys of the rows written."""
    columns = tuple(c for c in rows[0] if c not in ("k_key", "k_version"))
    cache_key = (table, key, version, columns)
    q = _UNNEST.get(cache_key)
    if q is None:
        dialect = conn.dialect
        quote = dialect.identifier_preparer.quote
        name = dialect.identifier_preparer.format_table(table)
        params = {**{c: table.c[c] for c in columns}, "k_key": table.c[key], "k_version": table.c[version]}
        q = _UNNEST[cache_key] = Compiled.of_text(
            f"UPDATE {name} SET {', '.join(f'{quote(c)} = v.{quote(c)}' for c in columns)} "
            f"FROM unnest({_arrays(dialect, params)}) AS v({', '.join(quote(c) for c in params)}) "
            f"WHERE {name}.{quote(key)} = v.k_key AND {name}.{quote(version)} = v.k_version "
            f"RETURNING {name}.{quote(key)}")
    res = _run(conn, q, [{c: [row[c] for row in rows] for c in (*columns, "k_key", "k_version")}], many=False)
    return {r[0] for r in res.rows}


def _run(conn: Connection, q: Compiled, args: list[Any], *, many: bool) -> Result:
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # a connection in a transaction has one  # noqa: S101
    return _on_cursor(dbapi, conn.dialect, q, args, many=many)


def _on_cursor(dbapi: Any, dialect: Dialect, q: Compiled, args: list[Any], *, many: bool) -> Result:
    """``q`` on a cursor of the DBAPI connection ``dbapi``; a DBAPI error raised as SQLAlchemy's."""
    error = dialect.loaded_dbapi.Error
    cursor = dbapi.cursor()
    try:
        if many:
            cursor.executemany(q.sql, args)
            return Result((), cursor.rowcount)
        cursor.execute(q.sql, args[0])
        return Result(cursor.fetchall() if cursor.description else (), cursor.rowcount)
    except error as err:
        raise DBAPIError.instance(q.sql, args[0] if args else None, err, error, dialect=dialect) from err
    finally:
        cursor.close()
