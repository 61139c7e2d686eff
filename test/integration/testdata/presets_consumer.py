#!/usr/bin/env python3
"""Reads messages off a queue with pika, RabbitMQ's Python client, and prints
what a consumer in another language sees of them: one JSON array with, per
message, the routing, the properties, the body as text, and for each header
its value, its Python type and its AMQP field-table type (the one-letter tag
on the wire: S long string, l long-long int, I long int, t boolean,
T timestamp, F table, x byte array...).

usage: presets_consumer.py AMQP_URL QUEUE COUNT

test/integration/presets_consumer_test.go runs it; it exits non-zero when
fewer than COUNT messages arrive within 20 seconds.
"""
import datetime
import json
import struct
import sys
import time

import pika
import pika.data

# pika decodes a field table into Python values and forgets the field types,
# which are what tells a long string from a long-long or a timestamp. This
# decode_table is pika.data.decode_table that also records, for the outermost
# table decoded last (a message's headers), each key's field-type tag.
_depth = 0
_last_types = None


def _decode_table(encoded, offset):
    global _depth, _last_types
    result, types = {}, {}
    size = struct.unpack_from('>I', encoded, offset)[0]
    offset += 4
    limit = offset + size
    _depth += 1
    try:
        while offset < limit:
            key, offset = pika.data.decode_short_string(encoded, offset)
            types[key] = encoded[offset:offset + 1].decode('latin-1')
            result[key], offset = pika.data.decode_value(encoded, offset)
    finally:
        _depth -= 1
    if _depth == 0:
        _last_types = types
    return result, offset


pika.data.decode_table = _decode_table


def plain(v):
    """A header value as JSON can carry it."""
    if isinstance(v, (str, bool, int, float)) or v is None:
        return v
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode('latin-1')
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return repr(v)


def main():
    global _last_types
    url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    out = []
    deadline = time.monotonic() + 20
    while len(out) < count:
        _last_types = None
        method, props, body = ch.basic_get(queue=queue, auto_ack=True)
        if method is None:
            if time.monotonic() > deadline:
                sys.exit('got %d of %d messages from %s' % (len(out), count, queue))
            time.sleep(0.1)
            continue
        headers = None
        if props.headers is not None:
            headers = {k: {'amqp': (_last_types or {}).get(k, '?'), 'python': type(v).__name__, 'value': plain(v)}
                       for k, v in props.headers.items()}
        out.append({
            'exchange': method.exchange,
            'routing_key': method.routing_key,
            'message_id': props.message_id,
            'content_type': props.content_type,
            'type': props.type,
            'app_id': props.app_id,
            'delivery_mode': props.delivery_mode,
            'timestamp': props.timestamp,
            'timestamp_python': type(props.timestamp).__name__,
            'headers': headers,
            'body': body.decode('utf-8'),
        })
    conn.close()
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == '__main__':
    main()
