"""Rebuild examples/shop.db from examples/shop.sql.

    python examples/make_shop_db.py [OUT]

writes the database to OUT (default: shop.db beside this file), replacing
it whole: built in a temporary file next to it, then renamed over it.
tests/docs/test_examples.py checks that the committed shop.db holds exactly what
shop.sql says; after editing shop.sql, run this and commit both.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SQL = HERE / "shop.sql"
DB = HERE / "shop.db"


def build(out: Path, sql: Path = SQL) -> Path:
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(sql.read_text())
            conn.commit()
            conn.execute("VACUUM")
        finally:
            conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def main(argv: list[str]) -> None:
    out = build(Path(argv[0]) if argv else DB)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
