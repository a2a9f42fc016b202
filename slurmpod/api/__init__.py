"""HTTP API: AWS JSON protocol, SageMaker model validation, handlers."""
