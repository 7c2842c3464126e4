//! `clone3` with `CLONE_INTO_CGROUP`: the child is created in its run's
//! cgroup instead of moving itself there (see `clone_child` for why that
//! matters). glibc has no clone3 wrapper that starts a function on a stack
//! of its own, which the `CLONE_VM | CLONE_VFORK` child needs (it must not
//! return into the frames of the suspended parent it shares memory with),
//! so the system call is made here: on x86_64 in a few instructions of
//! assembly that call the child's entry point on the new stack. Elsewhere,
//! and where the kernel refuses (before Linux 5.7, or a seccomp filter
//! that answers ENOSYS, as container runtimes' default profiles do), the
//! caller falls back to `clone` and a write to `cgroup.procs`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{ChildArgs, Stack};

/// Set once the kernel has said it has no usable `clone3` with
/// `CLONE_INTO_CGROUP`: not asked again.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, 88 bytes).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Resets the child's signal handlers to their defaults (Linux 5.5).
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

impl CloneArgs {
    /// A child with `flags` (and `CLONE_INTO_CGROUP`) in the cgroup whose
    /// directory is open as `cgroup`, on `stack`, SIGCHLD at its exit; its
    /// pidfd written to the address `pidfd` (0 without `CLONE_PIDFD`).
    fn into(flags: u64, pidfd: u64, stack: &Stack, cgroup: RawFd) -> CloneArgs {
        CloneArgs {
            flags: flags | CLONE_INTO_CGROUP,
            pidfd,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: libc::SIGCHLD as u64,
            stack: stack.base as u64,
            stack_size: stack.len as u64,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: cgroup as u64,
        }
    }
}

/// Creates the child in the cgroup whose directory is open as `cgroup`,
/// running `child_main(args)` on `stack`; its pidfd goes to `pidfd`.
/// Returns the child's pid once it has called execve or exited, or None
/// if this could not be done (then nothing was created and the caller
/// clones the other way). Every signal must be blocked on this thread.
pub(super) fn into_cgroup(
    stack: &Stack,
    args: &ChildArgs,
    cgroup: RawFd,
    pidfd: &mut libc::c_int,
) -> Option<libc::pid_t> {
    if UNAVAILABLE.load(Ordering::Relaxed) || cgroup < 0 || forced_off() {
        return None;
    }
    let clone_args = CloneArgs::into(
        (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64,
        pidfd as *mut libc::c_int as u64,
        stack,
        cgroup,
    );
    let ret = raw_clone3(&clone_args, args)?;
    if ret >= 0 {
        return libc::pid_t::try_from(ret).ok();
    }
    let errno = -ret as libc::c_int;
    // No clone3 (ENOSYS), a struct or flag this kernel does not know (E2BIG,
    // EINVAL): never again. Anything else (the cgroup refused this child)
    // is left to the other way, which reports it as a failed step.
    if matches!(errno, libc::ENOSYS | libc::E2BIG | libc::EINVAL) {
        UNAVAILABLE.store(true, Ordering::Relaxed);
    }
    None
}

/// Creates a keeper (see `cgroup.rs`) in the cgroup whose directory is open
/// as `cgroup`: a process sharing the daemon's memory (`CLONE_VM`, so no
/// page table is copied) that closes every descriptor, asks to be killed
/// with its parent (`PR_SET_PDEATHSIG`), names itself `rea-keeper`, leaves
/// the daemon's session and then sleeps in `pause` for the rest of its
/// life with every signal blocked: only SIGKILL ends it. It runs no code
/// but the instructions below (no stack, no thread-local `errno`), since
/// the daemon goes on using the memory it shares at once. `parent` is the
/// daemon's pid (a daemon that died before the death signal was set makes
/// it exit at once). Its signal handlers are reset at the clone
/// (`CLONE_CLEAR_SIGHAND`), so it holds none of the daemon's. None if this
/// is not tried here (not x86_64, no `clone3`); `Some(Err(errno))` if the
/// kernel refused. The caller must block every signal on this thread
/// around the call, so the keeper starts with them blocked.
pub(super) fn keeper(
    stack: &Stack,
    cgroup: RawFd,
    parent: libc::pid_t,
) -> Option<Result<libc::pid_t, libc::c_int>> {
    if UNAVAILABLE.load(Ordering::Relaxed) || cgroup < 0 || forced_off() {
        return None;
    }
    let clone_args = CloneArgs::into(
        libc::CLONE_VM as u64 | CLONE_CLEAR_SIGHAND,
        0,
        stack,
        cgroup,
    );
    let ret = raw_keeper(&clone_args, parent)?;
    Some(match libc::pid_t::try_from(ret) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(libc::c_int::try_from(-ret).unwrap_or(libc::EINVAL)),
    })
}

/// The keeper's name, as `PR_SET_NAME` reads it (at most 16 bytes).
static KEEPER_NAME: &[u8; 11] = b"rea-keeper\0";

#[cfg(target_arch = "x86_64")]
fn raw_keeper(clone_args: &CloneArgs, parent: libc::pid_t) -> Option<i64> {
    let ret: i64;
    // SAFETY: clone3 with CLONE_VM and without CLONE_VFORK: the parent goes
    // on at once, so the child must touch none of the memory they share.
    // It does not: after the `syscall` it makes only system calls with
    // immediate arguments, `parent` (r12) and the address of a static
    // (r13), never pushes (no `call`), and never returns: it ends in
    // `exit` or in the `pause` loop. `syscall` clobbers rcx and r11 in both.
    // The parent continues at label 2 with the pid or -errno in rax.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // close_range(0, ~0, 0)
            "mov eax, 436",
            "xor edi, edi",
            "mov esi, -1",
            "xor edx, edx",
            "syscall",
            "mov edi, 1",
            "test rax, rax",
            "jnz 3f",
            // prctl(PR_SET_PDEATHSIG, SIGKILL)
            "mov eax, 157",
            "mov edi, 1",
            "mov esi, 9",
            "syscall",
            "mov edi, 2",
            "test rax, rax",
            "jnz 3f",
            // getppid() == parent, or the daemon is already gone
            "mov eax, 110",
            "syscall",
            "mov edi, 3",
            "cmp rax, r12",
            "jne 3f",
            // prctl(PR_SET_NAME, "rea-keeper")
            "mov eax, 157",
            "mov edi, 15",
            "mov rsi, r13",
            "syscall",
            // setsid()
            "mov eax, 112",
            "syscall",
            "4:",
            // pause(), for ever: every signal is blocked
            "mov eax, 34",
            "syscall",
            "jmp 4b",
            "3:",
            // exit(step)
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") clone_args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") i64::from(parent),
            in("r13") KEEPER_NAME.as_ptr(),
            lateout("rcx") _,
            lateout("r11") _,
            lateout("rdx") _,
            options(nostack),
        );
    }
    Some(ret)
}

#[cfg(not(target_arch = "x86_64"))]
fn raw_keeper(_: &CloneArgs, _: libc::pid_t) -> Option<i64> {
    None
}

#[cfg(test)]
thread_local! {
    /// Set by a test: this thread's spawns take the other way.
    static FORCED_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// For tests: this thread's spawns write to `cgroup.procs` instead (`off`),
/// or use `clone3` again.
#[cfg(test)]
pub(crate) fn force_off(off: bool) {
    FORCED_OFF.with(|f| f.set(off));
}

/// Whether `clone3` has been ruled out by the kernel.
#[cfg(test)]
pub(crate) fn unavailable() -> bool {
    UNAVAILABLE.load(Ordering::Relaxed)
}

#[cfg(test)]
fn forced_off() -> bool {
    FORCED_OFF.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn forced_off() -> bool {
    false
}

/// The system call: its raw return (pid, or -errno); None where this
/// architecture has no implementation here.
#[cfg(target_arch = "x86_64")]
fn raw_clone3(clone_args: &CloneArgs, args: &ChildArgs) -> Option<i64> {
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = super::child_main;
    let ret: i64;
    // SAFETY: clone3 with CLONE_VM | CLONE_VFORK: this thread is suspended
    // until the child calls execve or exits, so `clone_args`, `args` and
    // this frame stay valid and untouched meanwhile. The child starts after
    // the `syscall` instruction with rax = 0 and rsp at the top of `stack`
    // (a mapping of its own, page-aligned, so 16-byte aligned before the
    // `call` as the ABI wants), and calls `child_main(args)`, which never
    // returns (it execs or `_exit`s); `ud2` traps if it ever did rather than
    // run on into the parent's code with the wrong stack. The parent sees
    // the pid or -errno in rax and continues at label 2; `syscall` clobbers
    // rcx and r11 only, and the child's use of rdi happens on its own
    // registers. `child_main` makes only async-signal-safe raw system calls
    // on memory prepared before the clone (see the module documentation of
    // `process`).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") clone_args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") args as *const ChildArgs,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    Some(ret)
}

#[cfg(not(target_arch = "x86_64"))]
fn raw_clone3(_: &CloneArgs, _: &ChildArgs) -> Option<i64> {
    UNAVAILABLE.store(true, Ordering::Relaxed);
    None
}
