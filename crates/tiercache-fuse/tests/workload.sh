#!/bin/bash
# Scripted workload run once on the mount and once on a plain directory;
# the harness compares the printed output, exit codes and resulting trees.
# Must be deterministic: no timestamps, inode numbers or absolute paths.
set -u
umask 022
step() { echo "### $*"; "$@" 2>&1; echo "rc=$?"; }

step mkdir -p src/a/b src/empty
seq 1 20000 > src/a/b/nums
printf 'hello\n' > src/hello
printf 'secret\n' > src/a/f1
step chmod 640 src/a/f1
step chmod 4755 src/hello
step chmod 2775 src/a/b
step ln -s ../hello src/a/link
step ln -s does-not-exist src/dangling
step ln src/hello src/hardlink
step python3 -c 'import os; os.setxattr("src/hello", "user.color", b"blue"); os.setxattr("src/a", "user.dir", b"yes")'
step stat -c '%n %A %h %s' src/hello src/hardlink src/a/f1 src/a/link
step readlink src/a/link src/dangling
step cat src/a/link

echo "## cp -a"
step cp -a src dst
step stat -c '%n %A %h %s' dst/hello dst/hardlink dst/a/b
step python3 -c 'import os; print(os.getxattr("dst/hello", "user.color"))'
step diff -r src dst

echo "## tar"
step tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf t.tar src
step sha256sum t.tar
step mkdir ex
step tar -xpf t.tar -C ex
step diff -r src ex/src
step tar -tvf t.tar

echo "## git"
step git init -q -b main repo
cd repo
printf 'one\n' > a.txt
mkdir sub && printf 'two\n' > sub/b.txt
step git add -A
step git commit -q -m first
step git log --format='%H %s'
step git checkout -q -b feature
printf 'changed\n' > a.txt
rm sub/b.txt
printf 'new\n' > c.txt
step git add -A
step git commit -q -m second
step git checkout -q main
step cat a.txt sub/b.txt
step ls
step git status --porcelain
step git log --all --format='%H %s'
step git fsck --no-progress
step git gc -q
step git log --all --format='%H %s'
cd ..

echo "## sqlite"
step sqlite3 db.sqlite 'create table t(a integer primary key, b text); insert into t(b) values ("x"),("y"),("z");'
step sqlite3 db.sqlite 'begin; update t set b = b || b; delete from t where a = 2; commit; select * from t;'
step sqlite3 db.sqlite 'pragma journal_mode=wal; insert into t(b) values ("w"); select count(*) from t; pragma integrity_check;'
step sqlite3 db.sqlite 'pragma wal_checkpoint(truncate); select group_concat(b) from t;'

echo "## rename"
step mv dst/hello dst/hello2
step mkdir d1 d2
touch d1/inner
step mv -T d1 d2
step ls d2
step touch x
step mv -T x d2
step mkdir d3 && touch d3/f
step mv -T d2 d3
step mv src/a/f1 src/a/b/f1moved
step mv src/empty src/a/b/
step ls -R src

echo "## hard links"
step ln src/a/b/f1moved src/f1link
step stat -c '%h' src/f1link
step rm src/a/b/f1moved
step stat -c '%h' src/f1link
step cat src/f1link

echo "## fifo"
step mkfifo fifo1
step stat -c '%F %a' fifo1
( echo through-fifo > fifo1 ) &
step cat fifo1
wait

echo "## chmod truncate touch"
printf '0123456789' > touched1
step chmod 600 touched1
step truncate -s 100000 touched1
step stat -c '%s %a' touched1
step truncate -s 4 touched1
step cat touched1
step touch -d '2001-02-03 04:05:06' touched1
step touch -m -d @1000000000 touched2
step stat -c '%s %Y %X' touched1
step stat -c '%s %Y' touched2
step chmod u+x,g+w touched1
step stat -c '%a' touched1

echo "## append and overwrite"
echo a >> app
echo b >> app
step cat app
echo x > app
step cat app
printf 'XY' | dd of=src/a/b/nums bs=1 seek=5 conv=notrunc status=none
step head -c 20 src/a/b/nums
step dd if=/dev/zero of=big bs=64k count=40 status=none
step sha256sum big
step dd if=big of=big2 bs=1M status=none
step cmp big big2

echo "## listing"
step find . -path ./repo/.git -prune -o -printf '%p %y %m %n %l\n'
step df -P . >/dev/null
step rm -rf dst ex
step ls
