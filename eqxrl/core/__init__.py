"""The ground floor: type aliases, hyperparameter fields and the checks every other floor shares.

Nothing here knows about environments, agents or training; every other
package of eqxrl may import it, and it imports none of them.
"""

from ._checks import check_hyperparameter as check_hyperparameter
from ._checks import check_positive_int as check_positive_int
from ._checks import concrete_scalar as concrete_scalar
from ._checks import is_key as is_key
from ._checks import is_positive_int as is_positive_int
from ._checks import keys_as_data as keys_as_data
from ._checks import nanmean as nanmean
from ._checks import one_line as one_line
from ._checks import tree_mismatch as tree_mismatch
from ._checks import tree_select as tree_select
from ._compat import foreign_promotion as foreign_promotion
from ._compile_cache import COMPILE_CACHE_ENV as COMPILE_CACHE_ENV
from ._compile_cache import configure_compile_cache as configure_compile_cache
from ._compile_cache import default_compile_cache as default_compile_cache
from ._devices import CPU_DEVICES_ENV as CPU_DEVICES_ENV
from ._devices import available_cores as available_cores
from ._devices import configure_cpu_devices as configure_cpu_devices
from ._devices import one_device_for_one_run as one_device_for_one_run
from ._spec import class_path as class_path
from ._spec import from_spec as from_spec
from ._spec import import_class as import_class
from ._spec import is_trusted as is_trusted
from ._spec import register_component as register_component
from ._spec import registered_class as registered_class
from ._spec import trust_modules as trust_modules
from ._spec import trusting as trusting
from ._spec import to_spec as to_spec
from ._types import Action as Action
from ._types import EnvState as EnvState
from ._types import Key as Key
from ._types import Metrics as Metrics
from ._types import Obs as Obs
from ._types import Scalar as Scalar
from ._types import as_float as as_float
from ._types import is_float_converter as is_float_converter
from ._types import named_field as named_field
from ._types import hyperparameter as hyperparameter
from ._types import is_hyperparameter_field as is_hyperparameter_field
from ._paths import get_path as get_path
from ._paths import hyperparameter_paths as hyperparameter_paths
from ._paths import replace_paths as replace_paths
from ._paths import resolve_path as resolve_path
from ._paths import set_paths as set_paths
from ._version import __version__ as __version__
from ._version import version_note as version_note
