# Sourced: sets the UCX environment of a transport name for both test ends.
#   tcp  TCP over loopback
#   shm  shared memory (posix + cma); the bootstrap socket is still TCP on loopback
case "${1:-}" in
  tcp) export UCX_TLS=tcp UCX_NET_DEVICES=lo ;;
  shm) export UCX_TLS=posix,cma,self; unset UCX_NET_DEVICES ;;
  *) echo "unknown transport '${1:-}' (expected tcp or shm)" >&2; return 2 ;;
esac
