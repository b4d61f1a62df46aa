"""Is a Ray address a Ray cluster's? Said in one line within seconds (:func:`probe_address`),
before ``ray.init``, which keeps trying for minutes against an address where no Ray answers and
says nothing of what to fix (:mod:`grader.cohort.distributed` asks first).

Two forms (``make grade RAY_ADDRESS=...``): ``HOST:PORT``, the cluster's GCS, which a driver on a
node of the cluster joins; ``ray://HOST:PORT``, Ray Client's server, for any other machine.
"""
from __future__ import annotations

ADDRESS_PROBE_TIMEOUT_S = 5.0   # per step of probe_address: a TCP connection, then one gRPC call
RAY_CLIENT_PORT = 10001         # `ray start --head`'s default --ray-client-server-port


def _split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT`` or ``ray://HOST:PORT`` (``[IPv6]:PORT`` too), else None."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return (host, int(port)) if sep and host and port.isdigit() else None


def _within(seconds: float, call):
    """``call()``'s result, or ``TimeoutError`` after ``seconds`` (a name lookup cannot be given a
    timeout: it runs in a daemon thread, left behind if it hangs)."""
    import threading

    box: list = []

    def target():
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the caller
            box.append((False, exc))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    if not box:
        raise TimeoutError(f"no answer within {seconds:g} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _answers(host: str, port: int, service: str) -> bool | None:
    """Whether the gRPC server at host:port is Ray's ``service`` ('gcs': the cluster's GCS, which
    a driver on a node joins; 'client': Ray Client's server): True, False (a gRPC server without
    that service), or None (no gRPC server answered). One call each, as Ray's own clients make
    it: the GCS's GetClusterId, Ray Client's ping."""
    import grpc
    from ray.core.generated import (gcs_service_pb2, gcs_service_pb2_grpc, ray_client_pb2,
                                    ray_client_pb2_grpc)

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            if service == "gcs":
                gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
                    gcs_service_pb2.GetClusterIdRequest(), timeout=ADDRESS_PROBE_TIMEOUT_S)
            else:
                ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(
                    ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING),
                    timeout=ADDRESS_PROBE_TIMEOUT_S)
            return True
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return False
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return None
            return True   # it knows the call (and refused this one): the service is there


ADDRESS_HINT = ("the address `ray start --head` printed: HEAD:6379 from a node of the cluster, "
                f"ray://HEAD:{RAY_CLIENT_PORT} (Ray Client) from any other machine")


def probe_address(address: str) -> str | None:
    """Why ``address`` (``HOST:PORT``, a node joining the GCS, or ``ray://HOST:PORT``, Ray
    Client) is not a Ray cluster's, in one line, or None when the service it names answers there.
    Within about 3 x :data:`ADDRESS_PROBE_TIMEOUT_S`: ``ray.init`` itself keeps trying for
    minutes (a silent port: 35 s through Ray Client, over 3 min as HOST:PORT, measured with Ray
    2.60), printing Ray's warnings, and says nothing of what to fix."""
    import socket

    parsed = _split_address(address)
    if parsed is None:
        return f"RAY_ADDRESS={address} is not HOST:PORT or ray://HOST:PORT; use {ADDRESS_HINT}"
    host, port = parsed
    client = address.startswith("ray://")
    try:
        _within(ADDRESS_PROBE_TIMEOUT_S,
                lambda: socket.create_connection((host, port), ADDRESS_PROBE_TIMEOUT_S).close())
    except (OSError, TimeoutError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return (f"nothing answers at RAY_ADDRESS={address} ({why}): is Ray running there? "
                f"Check {ADDRESS_HINT}")
    wanted, other = ("client", "gcs") if client else ("gcs", "client")
    found = _within(2 * ADDRESS_PROBE_TIMEOUT_S, lambda: _answers(host, port, wanted))
    if found:
        return None
    if found is False and _within(2 * ADDRESS_PROBE_TIMEOUT_S, lambda: _answers(host, port, other)):
        if client:
            return (f"RAY_ADDRESS={address} is the cluster's GCS port, not Ray Client's: from a "
                    f"node use RAY_ADDRESS={host}:{port}; from any other machine "
                    f"ray://{host}:{RAY_CLIENT_PORT} (Ray Client's port)")
        return (f"RAY_ADDRESS={address} is Ray Client's port: use RAY_ADDRESS=ray://{host}:{port} "
                f"(or, from a node of the cluster, the GCS port, HEAD:6379)")
    return (f"something answers at RAY_ADDRESS={address}, but it is not "
            f"{'Ray Client' if client else 'a Ray GCS'}: check {ADDRESS_HINT}")
