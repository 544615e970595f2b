#!/usr/bin/python3
"""Calls moetierd's gRPC API from Python without moetier's client: Debian's
python3-grpcio and python3-protobuf, and a descriptor set made by protoc
from the repository's .proto files (no generated Python code):

  protoc --include_imports --descriptor_set_out=moetier.pb -I proto \\
      proto/moetier/v1/moetier.proto proto/grpc/health/v1/health.proto
  docs/api/generate.py --descriptors moetier.pb "The quick brown fox"

It checks the daemon's health, streams a generation and prints its stats.
"""
import argparse
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def message_classes(descriptor_set_path):
    """Message classes by full name, built from a FileDescriptorSet."""
    with open(descriptor_set_path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    pool = descriptor_pool.DescriptorPool()
    for file_proto in files:
        pool.Add(file_proto)
    get_class = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get_class is None:
        factory = message_factory.MessageFactory(pool)
        get_class = factory.GetPrototype
    classes = {}
    for file_proto in files:
        package = file_proto.package
        for message in file_proto.message_type:
            name = f"{package}.{message.name}"
            classes[name] = get_class(pool.FindMessageTypeByName(name))
    return classes


def method(channel, path, request_class, response_class, streaming):
    call = channel.unary_stream if streaming else channel.unary_unary
    return call(path, request_serializer=request_class.SerializeToString,
                response_deserializer=response_class.FromString)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt")
    parser.add_argument("--descriptors", required=True, help="descriptor set from protoc")
    parser.add_argument("--socket", default="/run/moetier/moetier.sock",
                        help="moetierd's API socket (default %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    m = message_classes(args.descriptors)
    channel = grpc.insecure_channel(f"unix:{args.socket}")

    check = method(channel, "/grpc.health.v1.Health/Check", m["grpc.health.v1.HealthCheckRequest"],
                   m["grpc.health.v1.HealthCheckResponse"], streaming=False)
    health = check(m["grpc.health.v1.HealthCheckRequest"](service="moetier.v1.Moetier"), timeout=10)
    status_name = health.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[health.status].name
    print(f"health: {status_name}", file=sys.stderr)

    generate = method(channel, "/moetier.v1.Moetier/Generate", m["moetier.v1.GenerateRequest"],
                      m["moetier.v1.GenerateResponse"], streaming=True)
    request = m["moetier.v1.GenerateRequest"](prompt=args.prompt, max_new_tokens=args.max_new_tokens)
    request.sampling.seed = args.seed
    stats = None
    for reply in generate(request, timeout=300):
        sys.stdout.write(reply.text)
        sys.stdout.flush()
        if reply.HasField("final_stats"):
            stats = reply.final_stats
    print()
    if stats is not None:
        print(f"{stats.generated_tokens} tokens, {stats.decode_tokens_per_s:.1f} tok/s "
              f"on {stats.worker_device}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
