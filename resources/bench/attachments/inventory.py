"""Stock keeping for a small workshop: items, locations, movements, and reorder reports.

The data lives in a JSON file next to the program. Every change is a movement (in, out, or a
transfer between locations), so the stock of an item can always be explained by its history.
"""
import argparse
import csv
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import date, datetime

DATA_FILE = "inventory.json"
LOW_STOCK = 5
DATE_FORMAT = "%Y-%m-%d"


class InventoryError(Exception):
    pass


@dataclass
class Item:
    sku: str
    name: str
    unit: str = "pcs"
    qty: int = 0
    location: str = "main"
    price: float = 0.0
    supplier: str = ""
    tags: list = field(default_factory=list)

    def value(self):
        return round(self.qty * self.price, 2)

    def to_dict(self):
        return {
            "sku": self.sku,
            "name": self.name,
            "unit": self.unit,
            "qty": self.qty,
            "location": self.location,
            "price": self.price,
            "supplier": self.supplier,
            "tags": list(self.tags),
        }

    @classmethod
    def from_dict(cls, d):
        return cls(
            sku=d["sku"],
            name=d["name"],
            unit=d.get("unit", "pcs"),
            qty=int(d.get("qty", 0)),
            location=d.get("location", "main"),
            price=float(d.get("price", 0.0)),
            supplier=d.get("supplier", ""),
            tags=list(d.get("tags", [])),
        )


@dataclass
class Movement:
    sku: str
    kind: str
    qty: int
    when: str
    note: str = ""
    source: str = ""
    target: str = ""

    def to_dict(self):
        return {
            "sku": self.sku,
            "kind": self.kind,
            "qty": self.qty,
            "when": self.when,
            "note": self.note,
            "source": self.source,
            "target": self.target,
        }


class Inventory:
    def __init__(self, path=DATA_FILE):
        self.path = path
        self.items = {}
        self.movements = []

    def load(self):
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            data = json.load(f)
        for d in data.get("items", []):
            item = Item.from_dict(d)
            self.items[item.sku] = item
        for d in data.get("movements", []):
            self.movements.append(Movement(**d))

    def save(self):
        data = {
            "items": [item.to_dict() for item in self.items.values()],
            "movements": [m.to_dict() for m in self.movements],
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, self.path)

    def add_item(self, sku, name, unit="pcs", price=0.0, supplier="", location="main"):
        if sku in self.items:
            raise InventoryError(f"item {sku} already exists")
        item = Item(sku=sku, name=name, unit=unit, price=price, supplier=supplier, location=location)
        self.items[sku] = item
        return item

    def get(self, sku):
        try:
            return self.items[sku]
        except KeyError:
            raise InventoryError(f"no item {sku}") from None

    def receive(self, sku, qty, note=""):
        if qty <= 0:
            raise InventoryError("qty must be positive")
        item = self.get(sku)
        item.qty += qty
        self.movements.append(Movement(sku, "in", qty, today(), note, target=item.location))
        return item.qty

    def issue(self, sku, qty, note=""):
        if qty <= 0:
            raise InventoryError("qty must be positive")
        item = self.get(sku)
        if item.qty < qty:
            raise InventoryError(f"only {item.qty} {item.unit} of {sku} in stock")
        item.qty -= qty
        self.movements.append(Movement(sku, "out", qty, today(), note, source=item.location))
        return item.qty

    def transfer(self, sku, target, note=""):
        item = self.get(sku)
        if item.location == target:
            raise InventoryError(f"{sku} is already in {target}")
        source = item.location
        item.location = target
        self.movements.append(Movement(sku, "transfer", item.qty, today(), note, source=source, target=target))
        return source

    def history(self, sku):
        return [m for m in self.movements if m.sku == sku]

    def total_value(self):
        return round(sum(item.value() for item in self.items.values()), 2)

    def by_location(self):
        out = {}
        for item in self.items.values():
            out.setdefault(item.location, []).append(item)
        return out

    def search(self, text):
        text = text.lower()
        return [item for item in self.items.values() if text in item.name.lower() or text in item.sku.lower()]


def today():
    return date.today().strftime(DATE_FORMAT)


def low_stock(inventory):
    result = []
    for item in inventory.items.values():
        if item.qty < LOW_STOCK:
            result.append(item)
    result.sort(key=lambda i: i.qty)
    return result


def reorder_report(inventory, path):
    rows = low_stock(inventory)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sku", "name", "qty", "unit", "supplier"])
        for item in rows:
            writer.writerow([item.sku, item.name, item.qty, item.unit, item.supplier])
    return len(rows)


def movements_between(inventory, start, end):
    first = datetime.strptime(start, DATE_FORMAT).date()
    last = datetime.strptime(end, DATE_FORMAT).date()
    out = []
    for m in inventory.movements:
        when = datetime.strptime(m.when, DATE_FORMAT).date()
        if first <= when <= last:
            out.append(m)
    return out


def print_table(items):
    if not items:
        print("(nothing)")
        return
    width = max(len(item.name) for item in items)
    for item in items:
        print(f"{item.sku:<10} {item.name:<{width}} {item.qty:>6} {item.unit:<5} {item.location}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Workshop stock keeping")
    parser.add_argument("--file", default=DATA_FILE)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("add")
    p.add_argument("sku")
    p.add_argument("name")
    p.add_argument("--unit", default="pcs")
    p.add_argument("--price", type=float, default=0.0)
    p.add_argument("--supplier", default="")

    p = sub.add_parser("receive")
    p.add_argument("sku")
    p.add_argument("qty", type=int)
    p.add_argument("--note", default="")

    p = sub.add_parser("issue")
    p.add_argument("sku")
    p.add_argument("qty", type=int)
    p.add_argument("--note", default="")

    p = sub.add_parser("move")
    p.add_argument("sku")
    p.add_argument("location")

    sub.add_parser("list")
    sub.add_parser("low")

    p = sub.add_parser("reorder")
    p.add_argument("csv")

    args = parser.parse_args(argv)
    inventory = Inventory(args.file)
    inventory.load()
    try:
        if args.command == "add":
            inventory.add_item(args.sku, args.name, args.unit, args.price, args.supplier)
        elif args.command == "receive":
            print(inventory.receive(args.sku, args.qty, args.note))
        elif args.command == "issue":
            print(inventory.issue(args.sku, args.qty, args.note))
        elif args.command == "move":
            inventory.transfer(args.sku, args.location)
        elif args.command == "list":
            print_table(sorted(inventory.items.values(), key=lambda i: i.sku))
        elif args.command == "low":
            print_table(low_stock(inventory))
        elif args.command == "reorder":
            print(f"{reorder_report(inventory, args.csv)} items to reorder")
    except InventoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    inventory.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
