# syntax=docker/dockerfile:1
#
# The Fabrik image: `fabrik` (control plane: `fabrik serve`, `fabrik up`, the CLI) and
# `fabrik-node-agent`, built in a Rust builder and shipped on distroless/cc (glibc, CA
# certificates, no shell). The Helm chart in helm/fabrik runs both binaries from this image.
#
#   docker build -t ghcr.io/fabrik-dev/fabrik:0.1.0 .
#
# The node agent loads the NVIDIA driver's libnvidia-ml.so.1 at run time; it is not in the
# image (the chart mounts the host's, or the NVIDIA container runtime injects it).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
# protoc and the well-known types: etcd-client (the `etcd` feature, on in the image: the chart
# runs several replicas on etcd) generates its gRPC code at build time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --features control-plane/etcd \
        -p control-plane --bin fabrik \
        -p node-agent --bin fabrik-node-agent \
    && install -D -m 0755 target/release/fabrik /out/fabrik \
    && install -D -m 0755 target/release/fabrik-node-agent /out/fabrik-node-agent

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/fabrik /usr/local/bin/fabrik
COPY --from=builder /out/fabrik-node-agent /usr/local/bin/fabrik-node-agent
# nonroot (65532); the node agent's DaemonSet runs it as root for the GPU devices.
USER 65532:65532
EXPOSE 6443
ENTRYPOINT ["/usr/local/bin/fabrik"]
CMD ["--help"]
