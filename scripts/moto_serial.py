"""moto's server, answering one request at a time, with transactions that
roll back only what they wrote.

moto's TransactWriteItems checks its conditions and writes without a lock,
and rolls a cancelled transaction back by restoring a copy of the whole
table taken when it began: under concurrent requests, a transaction that
loses its condition erases what another one committed meanwhile. DynamoDB
serialises conflicting transactions; so does this server, by serving one
request at a time (moto holds Python's GIL for nearly all of a request
anyway, so little is lost).

That copy also holds the table's every item and stream record, so each
transaction cost time in proportion to all the table ever held (some
100 ms after a few thousand writes). Here a transaction keeps a copy of
the items it names and the length of the table's stream, and a cancelled
one puts back exactly those.

    python moto_serial.py HOST PORT
"""

import copy
import os
import sys
import threading

from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


class _CopyAllButTables:
    """`copy` for moto's DynamoDB module: tables are not copied whole."""

    @staticmethod
    def deepcopy(value):
        return value if isinstance(value, Table) else copy.deepcopy(value)


def _transact_write_items(original):
    def transact(self, transact_items):
        saved, streams = [], {}
        for entry in transact_items:
            _, op = next(iter(entry.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue
            names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
            keys = op.get("Key") or {n: op.get("Item", {}).get(n) for n in names}
            try:
                hash_key, range_key = self.get_keys_value(table, keys)
                item = table.get_item(hash_key, range_key)
            except Exception:
                continue
            saved.append((table, hash_key, range_key, copy.deepcopy(item)))
            if table.stream_shard is not None:
                streams.setdefault(id(table), (table, len(table.stream_shard.items)))
        try:
            return original(self, transact_items)
        except Exception:
            for table, hash_key, range_key, item in reversed(saved):
                if range_key is None:
                    table.items.pop(hash_key, None)
                    if item is not None:
                        table.items[hash_key] = item
                else:
                    table.items[hash_key].pop(range_key, None)
                    if item is not None:
                        table.items[hash_key][range_key] = item
                    if not table.items[hash_key]:
                        del table.items[hash_key]
            for table, length in streams.values():
                del table.stream_shard.items[length:]
            raise

    return transact


def main() -> None:
    dynamodb_models.copy = _CopyAllButTables
    DynamoDBBackend.transact_write_items = _transact_write_items(
        DynamoDBBackend.transact_write_items
    )
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serial(environ, start_response):
        with one_at_a_time:
            # The whole body is produced under the lock.
            return list(app(environ, start_response))

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
