"""Storage that run directories, PBT run directories and saves share: files written so
that a crash cannot tear them, metadata reads bounded in size, and the integrity of
checkpoints (CRC-32 records, orbax's stored arrays checked before a read, one-line
`CheckpointError`s). For writing a run-directory format of your own with the same
guarantees; `eqxrl.runs` and `eqxrl.pbt` are built on it.
"""

from ._files import MAX_JSON_BYTES as MAX_JSON_BYTES
from ._files import atomic_write_bytes as atomic_write_bytes
from ._files import disk_remedy as disk_remedy
from ._files import is_step_name as is_step_name
from ._files import read_text_bounded as read_text_bounded
from ._files import temporary_dir as temporary_dir
from ._files import write_json as write_json
from ._integrity import CheckpointError as CheckpointError
from ._integrity import check_stored as check_stored
from ._integrity import checkpoint_write_error as checkpoint_write_error
from ._integrity import crc32_of as crc32_of
from ._integrity import meta_crc32 as meta_crc32
from ._integrity import read_meta as read_meta
from ._integrity import remove_temporary as remove_temporary
from ._integrity import stored_arrays as stored_arrays
