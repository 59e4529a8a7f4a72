# The pod sandbox image (registry.k8s.io/pause), built from the Kubernetes source's own
# build/pause/linux/pause.c.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
