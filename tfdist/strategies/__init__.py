"""Strategies from a name: one registry of `tf.distribute` strategies for Keras.

Example:

    >>> strategy = make_strategy("mirrored", cross_device_ops="reduction_to_one_device")
    >>> with strategy.scope():
    ...   model = keras.Sequential([keras.layers.Dense(10)])
    ...   model.compile(optimizer="sgd", loss="mse")

Names: one_device, default, mirrored, central_storage (`local`),
multi_worker_mirrored (`multi_worker_mirrored`), parameter_server
(`parameter_server`). This package registers each module's builder, and the
cluster check it owns, in `registry`, in the order below. What each returns is the real TensorFlow
strategy class (the multi-worker and parameter-server ones are thin
subclasses that refuse Keras 3 up front, see `keras_guard`).
"""

from tfdist.strategies import _local
from tfdist.strategies import _multi_worker_mirrored
from tfdist.strategies import _parameter_server
from tfdist._choices import Name
from tfdist._choices import StrategyTraits
from tfdist.strategies._registry import (STRATEGIES, ClusterArg, StrategyEntry,
                                        available_strategies, make_strategy, register,
                                        validate_cluster)
from tfdist.strategies._local import CROSS_DEVICE_OPS, CentralStorageStrategy
from tfdist.strategies._multi_worker_mirrored import (BYTES_PER_PACK, COMMUNICATION,
                                                     MultiWorkerMirroredStrategy)
from tfdist.strategies._parameter_server import ParameterServerStrategy
# Workers that disagree (model, versions, devices) are refused before the first collective.
from tfdist.strategies._fingerprint import checked_variables

register(Name.DEFAULT, _local.default)
register(Name.ONE_DEVICE, _local.one_device)
register(Name.MIRRORED, _local.mirrored)
register(Name.CENTRAL_STORAGE, _local.central_storage)
register(Name.MULTI_WORKER_MIRRORED, _multi_worker_mirrored.multi_worker_mirrored,
         check_cluster=_multi_worker_mirrored.check_cluster)
register(Name.PARAMETER_SERVER, _parameter_server.parameter_server,
         check_cluster=_parameter_server.check_cluster)

__all__ = ["BYTES_PER_PACK", "COMMUNICATION", "CROSS_DEVICE_OPS", "CentralStorageStrategy",
           "ClusterArg", "MultiWorkerMirroredStrategy", "ParameterServerStrategy",
           "STRATEGIES", "StrategyEntry", "StrategyTraits", "available_strategies",
           "checked_variables",
           "make_strategy", "register",
           "validate_cluster"]
