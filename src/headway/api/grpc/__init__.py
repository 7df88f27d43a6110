"""The Open Inference Protocol over gRPC (`inference.GRPCInferenceService`) beside REST."""
