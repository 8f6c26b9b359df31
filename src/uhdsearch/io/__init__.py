"""Reading and writing files: the only package that renames into place.

swap.py (the crash-atomic directory swap), files.py (files written whole or not at all), readers.py (readers that
name file and line), mapping.py (memory-mapped arrays, prefaulting), clib.py (the C calls Python lacks).
"""
from uhdsearch.io.files import atomic_save_npy, atomic_write_bytes, atomic_write_text, save_npy, write_json
from uhdsearch.io.mapping import is_memory_mapped, now_or_in_background, prefault, prefault_all
from uhdsearch.io.readers import load_npy, read_json, read_lines
from uhdsearch.io.swap import (atomic_directory, check_output_dir, disk_full_error, recover_directory,
                               remove_leftovers)

__all__ = ["atomic_directory", "atomic_save_npy", "atomic_write_bytes", "atomic_write_text", "check_output_dir",
           "disk_full_error", "is_memory_mapped", "load_npy", "now_or_in_background", "prefault", "prefault_all",
           "read_json", "read_lines", "recover_directory", "remove_leftovers", "save_npy", "write_json"]
