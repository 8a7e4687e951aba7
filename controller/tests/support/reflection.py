"""A gRPC server reflection client that is not flowmesh's: Python grpcio (Debian python3-grpcio)
with the reflection messages encoded and decoded by hand (their field numbers are the same in
grpc.reflection.v1 and grpc.reflection.v1alpha).

usage: reflection.py HOST:PORT v1|v1alpha

Prints `service NAME` for every listed service, then `file SYMBOL FILENAME methods=A,B` for the
file that defines grpc.health.v1.Health. Exits non-zero on any error.
"""

import sys

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string_field(number, text):
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def fields(buf):
    """(number, wire type, value) of every field of a protobuf message."""
    i = 0
    while i < len(buf):
        key = 0
        shift = 0
        while True:
            b = buf[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        number, wire = key >> 3, key & 7
        if wire == 0:
            v = 0
            shift = 0
            while True:
                b = buf[i]
                i += 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            yield number, wire, v
        elif wire == 2:
            n = 0
            shift = 0
            while True:
                b = buf[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            yield number, wire, buf[i : i + n]
            i += n
        elif wire == 5:
            yield number, wire, buf[i : i + 4]
            i += 4
        elif wire == 1:
            yield number, wire, buf[i : i + 8]
            i += 8
        else:
            raise ValueError("unsupported wire type %d" % wire)


def ask(channel, version, request):
    call = channel.stream_stream(
        "/grpc.reflection.%s.ServerReflection/ServerReflectionInfo" % version,
        request_serializer=None,
        response_deserializer=None,
    )
    replies = list(call(iter([request]), timeout=10))
    if len(replies) != 1:
        raise SystemExit("expected one reply, got %d" % len(replies))
    for number, _, value in fields(replies[0]):
        if number == 7:  # error_response
            detail = {n: v for n, _, v in fields(value)}
            raise SystemExit(
                "reflection error %s: %s" % (detail.get(1), bytes(detail.get(2, b"")).decode())
            )
        if number in (4, 6):
            return number, value
    raise SystemExit("reply holds no answer")


def main():
    addr, version = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(addr) as channel:
        # list_services = 7
        number, value = ask(channel, version, string_field(7, ""))
        if number != 6:
            raise SystemExit("list_services answered with field %d" % number)
        for n, _, service in fields(value):
            if n == 1:
                name = {k: v for k, _, v in fields(service)}.get(1, b"")
                print("service " + bytes(name).decode())
        # file_containing_symbol = 4
        symbol = "grpc.health.v1.Health"
        number, value = ask(channel, version, string_field(4, symbol))
        if number != 4:
            raise SystemExit("file_containing_symbol answered with field %d" % number)
        for n, _, fd in fields(value):
            if n != 1:
                continue
            filename = ""
            methods = []
            for k, _, v in fields(fd):
                if k == 1:
                    filename = bytes(v).decode()
                elif k == 6:  # service
                    for sk, _, sv in fields(v):
                        if sk == 2:  # method
                            m = {mk: mv for mk, _, mv in fields(sv)}
                            methods.append(bytes(m.get(1, b"")).decode())
            if methods:
                print("file %s %s methods=%s" % (symbol, filename, ",".join(methods)))


if __name__ == "__main__":
    main()
