"""The SageMaker service model from the installed botocore: the API contract slurmpod answers to."""

from __future__ import annotations

import functools

import botocore.loaders
import botocore.model

from slurmpod.errors import UnknownOperationException


class ServiceModel:
    """The SageMaker service model from the installed botocore, with convenience look-ups."""

    def __init__(self, model: botocore.model.ServiceModel) -> None:
        self._model = model
        self._operations = frozenset(model.operation_names)

    @classmethod
    def load(cls) -> ServiceModel:
        """Loads ``sagemaker/service-2`` from botocore's bundled data."""
        data = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
        return cls(botocore.model.ServiceModel(data, service_name="sagemaker"))

    @property
    def botocore_model(self) -> botocore.model.ServiceModel:
        """The underlying botocore model."""
        return self._model

    @property
    def api_version(self) -> str:
        """The model's API version, e.g. ``2017-07-24``."""
        return str(self._model.api_version)

    def operation_names(self) -> frozenset[str]:
        """Every operation name in the model."""
        return self._operations

    def has_operation(self, name: str) -> bool:
        """Whether ``name`` is an operation of the model."""
        return name in self._operations

    def operation(self, name: str) -> botocore.model.OperationModel:
        """The operation model.

        Raises:
            UnknownOperationException: ``name`` is not in the model.
        """
        if name not in self._operations:
            raise UnknownOperationException(f"Unknown operation {name}")
        return self._model.operation_model(name)

    def input_shape(self, name: str) -> botocore.model.StructureShape | None:
        """The operation's input structure, or None when it takes no input."""
        return self.operation(name).input_shape

    def output_shape(self, name: str) -> botocore.model.StructureShape | None:
        """The operation's output structure, or None when it returns nothing."""
        return self.operation(name).output_shape

    def error_codes(self, name: str) -> frozenset[str]:
        """The error codes the model lists for the operation."""
        shapes = self.operation(name).error_shapes
        return frozenset(s.metadata.get("error", {}).get("code", s.name) for s in shapes)


@functools.cache
def get_model() -> ServiceModel:
    """The process-wide SageMaker model, loaded once."""
    return ServiceModel.load()


def operation_names() -> frozenset[str]:
    """Every SageMaker operation name in the installed botocore model."""
    return get_model().operation_names()
