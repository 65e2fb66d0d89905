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
//! All four calls run as the caller (`creds.rs`): BACKING checks them again with the
//! caller's rights (reading `user.*` of a file root may not read on root-squashed NFS,
//! setting an ACL as the owner).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use fuser::INodeNo;

use crate::creds::Caller;
use crate::fs::{errno, OpResult, TierFs};
use crate::sys;

impl TierFs {
    pub(crate) fn op_setxattr(
        &self,
        c: Caller,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        self.meta_change(&node, Some(&nfd), &mut || {
            self.ident
                .run(c, || sys::setxattr_fd(nfd.raw(), &cname, value, flags))
        })
        .map_err(errno)
    }

    pub(crate) fn op_getxattr(
        &self,
        c: Caller,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
    ) -> OpResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        self.as_caller(c, || sys::getxattr_fd(nfd.raw(), &cname, size as usize))
    }

    pub(crate) fn op_listxattr(&self, c: Caller, ino: INodeNo, size: u32) -> OpResult<Vec<u8>> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        self.as_caller(c, || sys::listxattr_fd(nfd.raw(), size as usize))
    }

    pub(crate) fn op_removexattr(&self, c: Caller, ino: INodeNo, name: &OsStr) -> OpResult<()> {
        let node = self.inode(ino)?;
        let nfd = self.node_fd(&node)?;
        let cname = sys::bytes_cstr(name.as_bytes()).map_err(errno)?;
        self.meta_change(&node, Some(&nfd), &mut || {
            self.ident.run(c, || sys::removexattr_fd(nfd.raw(), &cname))
        })
        .map_err(errno)
    }
}
