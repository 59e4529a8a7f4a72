# podset-operator's image built offline (hack/build-image.sh, buildah, no Docker engine):
# the static binary of hack/build-static.sh, nothing else. The same runtime layout as the
# Dockerfile's run stage (path, user, ports, entrypoint); a test keeps the two in step.
FROM scratch
COPY podset-operator /podset-operator
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/podset-operator"]
CMD ["run"]
