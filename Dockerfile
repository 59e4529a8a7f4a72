# syntax=docker/dockerfile:1
# podset-operator: a static binary on distroless/static, as a non-root user.
# `make docker-build` builds it. The binary comes from hack/build-static.sh, the same script
# `make test` runs and checks (static, runs alone in an empty root), so this recipe cannot rot
# unnoticed.

# Build stage: Debian bookworm (glibc's static libc.a comes with libc6-dev), the Rust toolchain.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The whole workspace (every member's manifest must parse); .dockerignore leaves out target/.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target/static \
    hack/build-static.sh /out/podset-operator

# Run stage: no shell, no libc, CA certificates and /etc/passwd only; uid 65532 (nonroot).
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="podset-operator" \
      org.opencontainers.image.description="PodSet and At (cnat) Kubernetes operators" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/podset-operator /podset-operator
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/podset-operator"]
CMD ["run"]
