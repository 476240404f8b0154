"""Runs the SQL of docs/parquet.md, as a user would paste it, with DuckDB over a dataset.

usage: parquet_queries.py PAGE DATASET [BASELINE_RUN CANDIDATE_RUN]

Prints one JSON object: for each ```sql block after the first (the views), its heading
(the `###` line above it) and its rows as objects keyed by column name.
"""

import json
import sys

import duckdb


def blocks(page):
    heading, sql, out = None, None, []
    for line in open(page, encoding="utf-8"):
        if sql is not None:
            if line.strip().startswith("```"):
                out.append((heading, "".join(sql)))
                sql = None
            else:
                sql.append(line)
        elif line.startswith("### "):
            heading = line[4:].strip()
        elif line.strip() == "```sql":
            sql = []
    return out


def main():
    page, dataset = sys.argv[1], sys.argv[2].rstrip("/")
    runs = sys.argv[3:5]
    con = duckdb.connect()
    found = blocks(page)
    if not found:
        sys.exit(f"{page}: no sql blocks")
    result = {}
    for i, (heading, sql) in enumerate(found):
        sql = sql.replace("'dataset/", f"'{dataset}/")
        if "BASELINE_RUN" in sql:
            if not runs:
                continue
            sql = sql.replace("BASELINE_RUN", runs[0]).replace("CANDIDATE_RUN", runs[1])
        cursor = con.execute(sql)
        if i == 0:
            continue
        names = [d[0] for d in cursor.description]
        result[heading] = [dict(zip(names, row)) for row in cursor.fetchall()]
    print(json.dumps(result))


main()
