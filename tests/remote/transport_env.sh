# Sourced: sets the UCX environment of a transport name for both test ends.
#   tcp  TCP over loopback
#   shm  shared memory (posix + cma); the bootstrap socket is still TCP on loopback
#   default  no UCX settings: UCX picks from all it has (an agent started by systemd)
case "${1:-}" in
  tcp) export UCX_TLS=tcp UCX_NET_DEVICES=lo ;;
  shm) export UCX_TLS=posix,cma,self; unset UCX_NET_DEVICES ;;
  default) unset UCX_TLS UCX_NET_DEVICES ;;
  *) echo "unknown transport '${1:-}' (expected tcp, shm or default)" >&2; return 2 ;;
esac
