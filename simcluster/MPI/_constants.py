"""mpi4py's integer constants, with MPICH's values (the MPI library mpi4py is most often built on).

Wildcards and null ranks keep MPICH's numbers (``ANY_SOURCE == -2``,
``PROC_NULL == -1``, ``UNDEFINED == -32766``), so code that prints or compares
them sees what it would under ``mpiexec``. The facade translates them to
simcluster's own sentinels at each call; nothing below is used by the engine.

Rule 1: only values mpi4py defines live here (names mpi4py lacks stay AttributeError).
Rule 2: attribute keyvals (``TAG_UB``, ``WTIME_IS_GLOBAL``, ...) are keys for
``Comm.Get_attr``, as in MPI, not the values themselves.
"""

from __future__ import annotations

from typing import Final

# ---- keyvals for Comm.Get_attr (MPICH's handles) ----
TAG_UB: Final = 1681915905
IO: Final = 1681915909
WTIME_IS_GLOBAL: Final = 1681915911
UNIVERSE_SIZE: Final = 1681915913
LASTUSEDCODE: Final = 1681915915
APPNUM: Final = 1681915917
KEYVAL_INVALID: Final = 603979776
WIN_BASE: Final = 1711276033
WIN_SIZE: Final = 1711276035
WIN_DISP_UNIT: Final = 1711276037
WIN_CREATE_FLAVOR: Final = 1711276039
WIN_FLAVOR: Final = 1711276039
WIN_MODEL: Final = 1711276041

# ---- the MPI standard this facade follows (nonblocking collectives and matched probes: MPI-3.1) ----
VERSION: Final = 4
SUBVERSION: Final = 1

# ---- topology placeholders (weights of graph topologies, unsupported) ----
UNWEIGHTED: Final = 1
WEIGHTS_EMPTY: Final = 2

# ---- the rest, with MPICH's values ----
ANY_SOURCE: Final = -2
ANY_TAG: Final = -1
BSEND_OVERHEAD: Final = 96
CART: Final = 2
COMBINER_CONTIGUOUS: Final = 3
COMBINER_DARRAY: Final = 14
COMBINER_DUP: Final = 2
COMBINER_F90_COMPLEX: Final = 16
COMBINER_F90_INTEGER: Final = 17
COMBINER_F90_REAL: Final = 15
COMBINER_HINDEXED: Final = 9
COMBINER_HINDEXED_BLOCK: Final = 19
COMBINER_HVECTOR: Final = 6
COMBINER_INDEXED: Final = 7
COMBINER_INDEXED_BLOCK: Final = 10
COMBINER_NAMED: Final = 1
COMBINER_RESIZED: Final = 18
COMBINER_STRUCT: Final = 12
COMBINER_SUBARRAY: Final = 13
COMBINER_VALUE_INDEX: Final = 20
COMBINER_VECTOR: Final = 4
COMM_TYPE_HW_GUIDED: Final = 2
COMM_TYPE_HW_UNGUIDED: Final = 3
COMM_TYPE_RESOURCE_GUIDED: Final = 4
COMM_TYPE_SHARED: Final = 1
CONGRUENT: Final = 1
DISPLACEMENT_CURRENT: Final = -54278278
DISP_CUR: Final = -54278278
DISTRIBUTE_BLOCK: Final = 121
DISTRIBUTE_CYCLIC: Final = 122
DISTRIBUTE_DFLT_DARG: Final = -49767
DISTRIBUTE_NONE: Final = 123
DIST_GRAPH: Final = 3
ERR_ABI: Final = 1073741823
ERR_ACCESS: Final = 20
ERR_AMODE: Final = 21
ERR_ARG: Final = 12
ERR_ASSERT: Final = 53
ERR_BAD_FILE: Final = 22
ERR_BASE: Final = 46
ERR_BUFFER: Final = 1
ERR_COMM: Final = 5
ERR_CONVERSION: Final = 23
ERR_COUNT: Final = 2
ERR_DIMS: Final = 11
ERR_DISP: Final = 52
ERR_DUP_DATAREP: Final = 24
ERR_ERRHANDLER: Final = 80
ERR_FILE: Final = 27
ERR_FILE_EXISTS: Final = 25
ERR_FILE_IN_USE: Final = 26
ERR_GROUP: Final = 8
ERR_INFO: Final = 28
ERR_INFO_KEY: Final = 29
ERR_INFO_NOKEY: Final = 31
ERR_INFO_VALUE: Final = 30
ERR_INTERN: Final = 16
ERR_IN_STATUS: Final = 17
ERR_IO: Final = 32
ERR_KEYVAL: Final = 48
ERR_LASTCODE: Final = 1073741823
ERR_LOCKTYPE: Final = 47
ERR_NAME: Final = 33
ERR_NOT_SAME: Final = 35
ERR_NO_MEM: Final = 34
ERR_NO_SPACE: Final = 36
ERR_NO_SUCH_FILE: Final = 37
ERR_OP: Final = 9
ERR_OTHER: Final = 15
ERR_PENDING: Final = 18
ERR_PORT: Final = 38
ERR_PROC_ABORTED: Final = 76
# ULFM's classes have the values of MPICH's mpi.h (MPIX_ERR_PROC_FAILED, ...); an mpi4py
# built without ULFM maps all three to ERR_UNKNOWN (13), which leaves them indistinguishable
ERR_PROC_FAILED: Final = 101
ERR_PROC_FAILED_PENDING: Final = 102
ERR_QUOTA: Final = 39
ERR_RANK: Final = 6
ERR_READ_ONLY: Final = 40
ERR_REQUEST: Final = 19
ERR_REVOKED: Final = 103
ERR_RMA_ATTACH: Final = 56
ERR_RMA_CONFLICT: Final = 49
ERR_RMA_FLAVOR: Final = 58
ERR_RMA_RANGE: Final = 55
ERR_RMA_SHARED: Final = 57
ERR_RMA_SYNC: Final = 50
ERR_ROOT: Final = 7
ERR_SERVICE: Final = 41
ERR_SESSION: Final = 75
ERR_SIZE: Final = 51
ERR_SPAWN: Final = 42
ERR_TAG: Final = 4
ERR_TOPOLOGY: Final = 10
ERR_TRUNCATE: Final = 14
ERR_TYPE: Final = 3
ERR_UNKNOWN: Final = 13
ERR_UNSUPPORTED_DATAREP: Final = 43
ERR_UNSUPPORTED_OPERATION: Final = 44
ERR_VALUE_TOO_LARGE: Final = 77
ERR_WIN: Final = 45
SUCCESS: Final = 0
F_ERROR: Final = 4
F_SOURCE: Final = 2
F_STATUS_SIZE: Final = 5
F_TAG: Final = 3
GRAPH: Final = 1
IDENT: Final = 0
LOCK_EXCLUSIVE: Final = 234
LOCK_SHARED: Final = 235
MAX_DATAREP_STRING: Final = 128
MAX_ERROR_STRING: Final = 512
MAX_INFO_KEY: Final = 255
MAX_INFO_VAL: Final = 1024
MAX_LIBRARY_VERSION_STRING: Final = 8192
MAX_OBJECT_NAME: Final = 128
MAX_PORT_NAME: Final = 1024
MAX_PROCESSOR_NAME: Final = 128
MAX_PSET_NAME_LEN: Final = 256
MAX_STRINGTAG_LEN: Final = 256
MODE_APPEND: Final = 128
MODE_CREATE: Final = 1
MODE_DELETE_ON_CLOSE: Final = 16
MODE_EXCL: Final = 64
MODE_NOCHECK: Final = 1024
MODE_NOPRECEDE: Final = 8192
MODE_NOPUT: Final = 4096
MODE_NOSTORE: Final = 2048
MODE_NOSUCCEED: Final = 16384
MODE_RDONLY: Final = 2
MODE_RDWR: Final = 8
MODE_SEQUENTIAL: Final = 256
MODE_UNIQUE_OPEN: Final = 32
MODE_WRONLY: Final = 4
ORDER_C: Final = 56
ORDER_F: Final = 57
ORDER_FORTRAN: Final = 57
PROC_NULL: Final = -1
ROOT: Final = -3
SEEK_CUR: Final = 602
SEEK_END: Final = 604
SEEK_SET: Final = 600
SIMILAR: Final = 2
THREAD_FUNNELED: Final = 1
THREAD_MULTIPLE: Final = 3
THREAD_SERIALIZED: Final = 2
THREAD_SINGLE: Final = 0
TYPECLASS_COMPLEX: Final = 3
TYPECLASS_INTEGER: Final = 2
TYPECLASS_LOGICAL: Final = 4
TYPECLASS_REAL: Final = 1
UNDEFINED: Final = -32766
UNEQUAL: Final = 3
WIN_FLAVOR_ALLOCATE: Final = 2
WIN_FLAVOR_CREATE: Final = 1
WIN_FLAVOR_DYNAMIC: Final = 3
WIN_FLAVOR_SHARED: Final = 4
WIN_SEPARATE: Final = 1
WIN_UNIFIED: Final = 2