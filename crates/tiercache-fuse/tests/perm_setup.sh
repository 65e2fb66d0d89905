#!/bin/bash
# Builds the fixture of the permission test (run as root in each of a/ and b/).
set -eu
umask 022
mkdir priv && echo x > priv/inner && chown 1000:1000 priv && chmod 0700 priv
echo secret > secret && chown 1000:1000 secret && chmod 600 secret
echo pub > public && chown 1000:1000 public && chmod 644 public
echo gr > grp && chown 0:1000 grp && chmod 640 grp
echo w > worldw && chown 1000:1000 worldw && chmod 666 worldw
mkdir ro && chown 1000:1000 ro && chmod 755 ro
mkdir open && chmod 777 open
mkdir sticky && chmod 1777 sticky && echo v > sticky/victim && chown 1000:1000 sticky/victim && chmod 666 sticky/victim
mkdir sg && chown 1000:1000 sg && chmod 2777 sg
mkdir xonly && echo h > xonly/hidden && chmod 644 xonly/hidden && chmod 711 xonly
# POSIX ACLs (decided by the kernel from the ACL xattrs once FUSE_POSIX_ACL is negotiated)
echo ad > acl_deny && chown 0:1000 acl_deny && chmod 640 acl_deny && setfacl -m u:65534:--- acl_deny
echo aa > acl_allow && chmod 600 acl_allow && setfacl -m u:65534:r-- acl_allow
mkdir acl_dir && chmod 755 acl_dir && setfacl -m u:65534:rwx acl_dir && setfacl -d -m u:65534:rw,g::r,o::- acl_dir
