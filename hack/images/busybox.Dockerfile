# busybox from Debian's busybox-static: the binary, one symlink per applet, and nobody (65534)
# in /etc/passwd, so pods saying `image: busybox` run as on a real cluster.
FROM scratch
COPY rootfs/ /
CMD ["sh"]
