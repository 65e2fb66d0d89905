//! Extended attributes, passed through to the backing inode.
//!
//! The calls go through the `/proc/self/fd/N` magic link of the node's
//! `O_PATH` descriptor, which names the inode itself (for a symlink: the link,
//! so `user.*` on symlinks fails with `EPERM` exactly as natively). Permission
//! checks (`trusted.*` needs `CAP_SYS_ADMIN`, `user.*` needs write access)
//! are done by the kernel's VFS before the request reaches us.
//! POSIX ACL xattrs (`system.posix_acl_access`, `_default`) pass through too:
//! the mount negotiates `FUSE_POSIX_ACL`, so the kernel caches them and checks
//! access with them (`default_permissions`), and `setfacl` through the mount
//! changes BACKING's ACL (and with it the mode, as BACKING's file system does).
//! Default ACLs apply natively: new objects are created by BACKING's file
//! system under the caller's umask (`FUSE_DONT_MASK`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fuser::INodeNo;

use crate::fs::{errno, OpResult, TierFs};
use crate::sys;

impl TierFs {
    pub(crate) fn op_setxattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        sys::setxattr_fd(nfd.raw(), &cname, value, flags).map_err(errno)
    }

    pub(crate) fn op_getxattr(&self, ino: INodeNo, name: &OsStr, size: u32) -> OpResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        sys::getxattr_fd(nfd.raw(), &cname, size as usize).map_err(errno)
    }

    pub(crate) fn op_listxattr(&self, ino: INodeNo, size: u32) -> OpResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        sys::listxattr_fd(nfd.raw(), size as usize).map_err(errno)
    }

    pub(crate) fn op_removexattr(&self, ino: INodeNo, name: &OsStr) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        sys::removexattr_fd(nfd.raw(), &cname).map_err(errno)
    }
}
