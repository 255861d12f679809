"""The gRPC frontend: Triton's ``inference.GRPCInferenceService`` on grpc's thread-pool
server."""

from naiad.frontends.grpc.listener import GRPCListener, start_grpc_server
from naiad.frontends.grpc.service import InferenceServicer

__all__ = ["GRPCListener", "InferenceServicer", "start_grpc_server"]
