# The operator image: a static-enough release build on a distroless, non-root base.
#   docker build -t capi-provider-operator:dev .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p capi-provider-operator --bin capi-provider-operator \
 && cp target/release/capi-provider-operator /capi-provider-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /capi-provider-operator /usr/local/bin/capi-provider-operator
# Memory freed by the render threads goes back to the system, and concurrent renders share one
# heap instead of one per thread (docs/performance.md); the Deployment and the chart set it
# too, so it holds for any image.
ENV GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=1
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/capi-provider-operator"]
CMD ["run", "--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"]
