"""The gRPC frontend: Triton's ``inference.GRPCInferenceService`` on naiad's own HTTP/2
server (``naiad_server``) or grpc's thread-pool server (``listener``)."""

from naiad.frontends.grpc.listener import GRPCListener
from naiad.frontends.grpc.service import InferenceServicer
from naiad.frontends.grpc.start import start_grpc_server

__all__ = ["GRPCListener", "InferenceServicer", "start_grpc_server"]
