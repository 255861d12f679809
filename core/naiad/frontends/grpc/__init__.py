"""The gRPC frontend: Triton's ``inference.GRPCInferenceService`` on grpc.aio."""

from naiad.frontends.grpc.service import InferenceServicer, start_grpc_server

__all__ = ["InferenceServicer", "start_grpc_server"]
