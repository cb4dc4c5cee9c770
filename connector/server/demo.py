"""The demo workspace: a small CRM — customers, products, orders, support tickets.

Deterministic (seeded), every column type, capitalised names, a few thousand rows; built
straight through `Storage` in well under a second.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from connector.server.storage import Storage

SEED = 20240601

_FIRST = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Margaret", "Ken", "Frances",
          "John", "Radia", "Tim", "Katherine", "Linus", "Hedy", "Dennis", "Sophie", "Guido"]
_LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Hamilton", "Thompson",
         "Allen", "Backus", "Perlman", "Berners-Lee", "Johnson", "Torvalds", "Lamarr", "Ritchie"]
_CITIES = ["Lisbon", "Berlin", "Nairobi", "Osaka", "Toronto", "Lima", "Oslo", "Pune", None]
_PRODUCTS = ["Widget", "Gadget", "Sprocket", "Gizmo", "Doohickey", "Flange", "Bracket", "Valve"]

SPECS: list[dict[str, Any]] = [
    {
        "name": "Customers",
        "columns": [
            {"name": "Name", "type": "text", "required": True},
            {"name": "Email", "type": "text"},
            {"name": "City", "type": "text"},
            {"name": "Status", "type": "choice", "options": ["Lead", "Active", "Churned"]},
            {"name": "Plan", "type": "choice", "options": ["Free", "Pro", "Enterprise"]},
            {"name": "Signed Up", "type": "date"},
            {"name": "Newsletter", "type": "checkbox"},
            {"name": "Lifetime Value", "type": "number"},
        ],
    },
    {
        "name": "Products",
        "columns": [
            {"name": "Name", "type": "text", "required": True},
            {"name": "Category", "type": "choice", "options": ["Hardware", "Software", "Service"]},
            {"name": "Price", "type": "number", "required": True},
            {"name": "In Stock", "type": "checkbox"},
            {"name": "Launched", "type": "date"},
        ],
    },
    {
        "name": "Orders",
        "columns": [
            {"name": "Order No", "type": "text", "required": True},
            {"name": "Customer", "type": "text"},
            {"name": "Product", "type": "text"},
            {"name": "Status", "type": "choice", "options": ["Pending", "Paid", "Shipped", "Cancelled"]},
            {"name": "Quantity", "type": "number"},
            {"name": "Amount", "type": "number"},
            {"name": "Ordered On", "type": "date"},
            {"name": "Gift", "type": "checkbox"},
        ],
    },
    {
        "name": "Tickets",
        "columns": [
            {"name": "Subject", "type": "text", "required": True},
            {"name": "Customer", "type": "text"},
            {"name": "Priority", "type": "choice", "options": ["Low", "Normal", "High", "Urgent"]},
            {"name": "Status", "type": "choice", "options": ["Open", "Pending", "Solved"]},
            {"name": "Opened", "type": "date"},
            {"name": "Escalated", "type": "checkbox"},
        ],
    },
]


def _day(rng: random.Random, start: dt.date, span: int) -> str:
    return (start + dt.timedelta(days=rng.randrange(span))).isoformat()


def seed_demo(storage: Storage, seed: int = SEED) -> None:
    """Create the demo tables and rows; does nothing if the workspace has any table."""
    if storage.summaries():
        return
    rng = random.Random(seed)
    tables = {spec["name"]: storage.create_table(spec) for spec in SPECS}
    base = dt.date(2023, 1, 1)
    batches: dict[str, list[dict[str, Any]]] = {name: [] for name in tables}

    customers = []
    for i in range(1200):
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        customers.append(name)
        row: dict[str, Any] = {
            "Name": name,
            "Email": f"{name.split()[0].lower()}.{i}@example.com" if rng.random() > 0.05 else None,
            "City": rng.choice(_CITIES),
            "Status": rng.choices(["Lead", "Active", "Churned"], [3, 6, 1])[0],
            "Plan": rng.choices(["Free", "Pro", "Enterprise"], [5, 3, 1])[0],
            "Signed Up": _day(rng, base, 700),
            "Newsletter": rng.random() < 0.4,
            "Lifetime Value": round(rng.lognormvariate(6, 1), 2),
        }
        batches["Customers"].append(row)

    products = []
    for i, base_name in enumerate(_PRODUCTS * 5):
        name = f"{base_name} {chr(65 + i // len(_PRODUCTS))}{i % len(_PRODUCTS) + 1}"
        products.append(name)
        batches["Products"].append({
            "Name": name,
            "Category": rng.choice(["Hardware", "Software", "Service"]),
            "Price": round(rng.uniform(5, 500), 2),
            "In Stock": rng.random() < 0.8,
            "Launched": _day(rng, dt.date(2020, 1, 1), 1400),
        })

    for i in range(2000):
        qty = rng.randint(1, 9)
        batches["Orders"].append({
            "Order No": f"SO-{10000 + i}",
            "Customer": rng.choice(customers),
            "Product": rng.choice(products),
            "Status": rng.choices(["Pending", "Paid", "Shipped", "Cancelled"], [2, 3, 6, 1])[0],
            "Quantity": qty,
            "Amount": round(qty * rng.uniform(5, 500), 2),
            "Ordered On": _day(rng, base, 700),
            "Gift": rng.random() < 0.1,
        })

    for i in range(400):
        batches["Tickets"].append({
            "Subject": f"{rng.choice(['Cannot log in', 'Invoice question', 'Feature request', 'Bug report', 'Refund'])} #{i + 1}",
            "Customer": rng.choice(customers),
            "Priority": rng.choice(["Low", "Normal", "High", "Urgent"]),
            "Status": rng.choices(["Open", "Pending", "Solved"], [2, 1, 5])[0],
            "Opened": _day(rng, dt.date(2024, 1, 1), 365),
            "Escalated": rng.random() < 0.07,
        })
    for name, rows in batches.items():
        table = tables[name]
        cells = [table.check_create({k: v for k, v in r.items() if v is not None}) for r in rows]
        storage.insert_rows(table, cells)
