"""A file's POSIX permissions as the readers of its document (``access_from: posix``).

The owner (when its read bit is set), the owning group and every named user and group of
the file's POSIX ACL (when the entry, under the ACL's mask, grants read) become
``user:<name>`` and ``group:<name>`` principals; a file everyone may read (the "other" read
bit) belongs to the whole tenant. Ids are named through the machine's user and group
databases (``getent``: local files, LDAP or SSSD where the share's host joins the directory),
then through ``names``, a small table for where the identity provider spells them otherwise
(``user:ana`` -> ``user:ana@example.com``). An id without a name is ``user:uid-1000``. Nobody
at all: an empty list, which only the tenant's admins read.

The ACL is read from the ``system.posix_acl_access`` extended attribute (Linux's layout: a
4-byte version, then 8-byte entries ``tag, perm, id``), which needs no library.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat as stat_module
import struct
from collections.abc import Mapping

from index.access import Access
from index.sources.kinds import Permissions

ACL_XATTR = "system.posix_acl_access"
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
READ = 0x04


def permissions_of(path: str, stat: os.stat_result) -> Permissions:
    return Permissions(stat.st_uid, stat.st_gid, stat_module.S_IMODE(stat.st_mode), _acl(path))


def _acl(path: str) -> tuple[tuple[int, int, int], ...]:
    try:
        raw = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError:  # no ACL beyond the mode bits, or a file system without ACLs
        return ()
    return tuple((tag, ident, perm) for tag, perm, ident in struct.iter_unpack("<HHI", raw[4:]))


def readers(granted: Permissions, names: Mapping[str, str] = {}) -> Access:
    """Who may read a file with these permissions, as principals (None: the tenant)."""
    if granted.mode & stat_module.S_IROTH:
        return None
    mask = next((perm for tag, _, perm in granted.acl if tag == MASK), 0o7)
    found = set()
    if granted.mode & stat_module.S_IRUSR:
        found.add(f"user:{_user(granted.uid)}")
    if granted.mode & stat_module.S_IRGRP and not granted.acl:  # with an ACL: the mask's bits
        found.add(f"group:{_group(granted.gid)}")
    for tag, ident, perm in granted.acl:
        if tag == USER and perm & mask & READ:
            found.add(f"user:{_user(ident)}")
        elif tag == GROUP_OBJ and perm & mask & READ:
            found.add(f"group:{_group(granted.gid)}")
        elif tag == GROUP and perm & mask & READ:
            found.add(f"group:{_group(ident)}")
    return tuple(sorted(names.get(p, p) for p in found))


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid-{uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid-{gid}"
