/*
 * slurmpod's container SPANK plugin: Pyxis's job options (srun, sbatch, salloc) on Debian's podman/crun.
 *
 *   --container-image=[USER@][REGISTRY#]IMAGE[:TAG] | /path/img.sqsh | /path/img.tar
 *   --container-mounts=SRC:DST[:ro],...   --container-workdir=DIR   --container-name=NAME
 *   --container-mount-home   --container-remap-root   --container-env=NAME,...
 *
 * Built by slurmpod's node layer against each image's own <slurm/spank.h> and listed (optional) in the
 * controller's plugstack.conf, which configless Slurm serves to every node.
 *
 *  - slurmstepd, once per step (init_post_opt, root): runs CONTAINER ("start"), which checks the options, makes
 *    the image present in the node's podman storage and starts a holder container; it answers "pid N",
 *    "workdir DIR" and the image's "env NAME=VALUE" lines. A failure (bad spec, unknown image, unreadable
 *    mount source) is kept and shown by every task, which then exits 1: the step fails, the node stays up.
 *  - every task, before it drops privileges (task_init_privileged): setns() into the holder's mount namespace:
 *    the task itself (its cgroup, environment, signals, Slurm's I/O) sees the image's root filesystem.
 *  - every task, as the user (task_init): the image's environment over the job's (except --container-env
 *    names and SLURM_*), --container-remap-root (a user namespace mapping the user to root), the workdir.
 *  - the holder is in the step's cgroup: it ends with the step (its container is removed by the job's next
 *    container step on the node); a named one (--container-name) is started again by the job's later steps,
 *    with its files. Job epilog: every container of the job is removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(containers, 1);

#define CONTAINER "/usr/lib/slurmpod/bin/slurmpod-container"
#define MAX_OUT (1 << 20)
/* <slurm/slurm.h>: SLURM_EXTERN_CONT, SLURM_BATCH_SCRIPT, SLURM_INTERACTIVE_STEP */
#define EXTERN_STEP 0xfffffffc
#define BATCH_STEP 0xfffffffb
#define INTERACTIVE_STEP 0xfffffffa

static char *opt_image, *opt_mounts, *opt_workdir, *opt_name, *opt_env;
static int opt_mount_home, opt_remap_root;

static int active;		/* this step runs in a container */
static int holder_pid;
static char *workdir;
static char *failure;		/* why the container could not be made (shown by the tasks) */
static char *helper_out;	/* the helper's stdout (env lines point into it) */

static int set_str(char **dst, const char *optarg, const char *what)
{
	if (optarg == NULL || *optarg == '\0') {
		slurm_error("containers: --%s needs a value", what);
		return -1;
	}
	free(*dst);
	*dst = strdup(optarg);
	return *dst ? 0 : -1;
}

static int cb_image(int v, const char *a, int r) { (void) v; (void) r; return set_str(&opt_image, a, "container-image"); }
static int cb_mounts(int v, const char *a, int r) { (void) v; (void) r; return set_str(&opt_mounts, a, "container-mounts"); }
static int cb_workdir(int v, const char *a, int r) { (void) v; (void) r; return set_str(&opt_workdir, a, "container-workdir"); }
static int cb_name(int v, const char *a, int r) { (void) v; (void) r; return set_str(&opt_name, a, "container-name"); }
static int cb_env(int v, const char *a, int r) { (void) v; (void) r; return set_str(&opt_env, a, "container-env"); }
static int cb_home(int v, const char *a, int r) { (void) a; (void) r; opt_mount_home = v; return 0; }
static int cb_remap(int v, const char *a, int r) { (void) v; (void) a; (void) r; opt_remap_root = 1; return 0; }

struct spank_option spank_options_reg[] = {
	{"container-image", "[REGISTRY#]IMAGE[:TAG]|PATH",
	 "[containers] the image to run the step's tasks in (the cluster's registry, or a .sqsh/.tar file)", 1, 0,
	 (spank_opt_cb_f) cb_image},
	{"container-mounts", "SRC:DST[:ro][,...]", "[containers] bind mounts into the container", 1, 0,
	 (spank_opt_cb_f) cb_mounts},
	{"container-workdir", "PATH", "[containers] working directory inside the container", 1, 0,
	 (spank_opt_cb_f) cb_workdir},
	{"container-name", "NAME", "[containers] keep the container under NAME for the job's later steps", 1, 0,
	 (spank_opt_cb_f) cb_name},
	{"container-mount-home", NULL, "[containers] bind mount the user's home directory", 0, 1,
	 (spank_opt_cb_f) cb_home},
	{"no-container-mount-home", NULL, "[containers] do not bind mount the user's home directory", 0, 0,
	 (spank_opt_cb_f) cb_home},
	{"container-remap-root", NULL, "[containers] become root inside the container (a user namespace)", 0, 0,
	 (spank_opt_cb_f) cb_remap},
	{"container-env", "NAME[,NAME...]", "[containers] variables whose job values win over the image's", 1, 0,
	 (spank_opt_cb_f) cb_env},
	SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	spank_context_t ctx = spank_context();
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
		return 0;
	for (struct spank_option *o = spank_options_reg; o->name; o++)
		if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
			slurm_error("containers: cannot register --%s", o->name);
			return -1;
		}
	return 0;
}

/* runs CONTAINER with argv as root, its stdout into *out; returns its exit status (-1: could not run) */
static int run_helper(char *const argv[], char **out, char **err)
{
	int po[2], pe[2];
	*out = *err = NULL;
	if (pipe2(po, O_CLOEXEC) < 0)
		return -1;
	if (pipe2(pe, O_CLOEXEC) < 0) {
		close(po[0]); close(po[1]);
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", NULL};
		execve(CONTAINER, argv, envp);
		fprintf(stderr, "slurmpod-container: cannot run %s: %s\n", CONTAINER, strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	char *bufs[2] = {calloc(1, MAX_OUT), calloc(1, MAX_OUT)};
	size_t lens[2] = {0, 0};
	int fds[2] = {po[0], pe[0]};
	for (int i = 0; i < 2; i++) {	/* the helper writes little to stderr: no deadlock reading stdout first */
		ssize_t n;
		while (bufs[i] && lens[i] < MAX_OUT - 1 && (n = read(fds[i], bufs[i] + lens[i], MAX_OUT - 1 - lens[i])) != 0) {
			if (n < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			lens[i] += (size_t) n;
		}
		close(fds[i]);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*out = bufs[0];
	*err = bufs[1];
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *last_line(char *text)
{
	if (text == NULL || *text == '\0')
		return NULL;
	size_t n = strlen(text);
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
		text[--n] = '\0';
	char *nl = strrchr(text, '\n');
	return nl ? nl + 1 : text;
}

static int ids(spank_t sp, uint32_t *job, uint32_t *step, uid_t *uid, gid_t *gid)
{
	return spank_get_item(sp, S_JOB_ID, job) == ESPANK_SUCCESS &&
	       spank_get_item(sp, S_JOB_STEPID, step) == ESPANK_SUCCESS &&
	       (uid == NULL || spank_get_item(sp, S_JOB_UID, uid) == ESPANK_SUCCESS) &&
	       (gid == NULL || spank_get_item(sp, S_JOB_GID, gid) == ESPANK_SUCCESS);
}

static void step_name(uint32_t step, char *buf, size_t len)
{
	if (step == BATCH_STEP)
		snprintf(buf, len, "batch");
	else if (step == INTERACTIVE_STEP)
		snprintf(buf, len, "interactive");
	else
		snprintf(buf, len, "%u", step);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_REMOTE || opt_image == NULL)
		return 0;
	uint32_t job = 0, step = 0;
	uid_t uid = 0;
	gid_t gid = 0;
	if (!ids(sp, &job, &step, &uid, &gid) || step == EXTERN_STEP)
		return 0;
	active = 1;
	char sjob[16], sstep[16], suid[16], sgid[16];
	snprintf(sjob, sizeof(sjob), "%u", job);
	step_name(step, sstep, sizeof(sstep));
	snprintf(suid, sizeof(suid), "%u", (unsigned) uid);
	snprintf(sgid, sizeof(sgid), "%u", (unsigned) gid);
	char *argv[24];
	int k = 0;
	argv[k++] = "slurmpod-container";
	argv[k++] = "start";
	argv[k++] = "--job"; argv[k++] = sjob;
	argv[k++] = "--step"; argv[k++] = sstep;
	argv[k++] = "--uid"; argv[k++] = suid;
	argv[k++] = "--gid"; argv[k++] = sgid;
	argv[k++] = "--image"; argv[k++] = opt_image;
	if (opt_mounts) { argv[k++] = "--mounts"; argv[k++] = opt_mounts; }
	if (opt_workdir) { argv[k++] = "--workdir"; argv[k++] = opt_workdir; }
	if (opt_name) { argv[k++] = "--name"; argv[k++] = opt_name; }
	if (opt_env) { argv[k++] = "--env"; argv[k++] = opt_env; }
	if (opt_mount_home) argv[k++] = "--mount-home";
	char script_dir[PATH_MAX] = "";
	int job_argc = 0;
	char **job_argv = NULL;
	if (step == BATCH_STEP && spank_get_item(sp, S_JOB_ARGV, &job_argc, &job_argv) == ESPANK_SUCCESS &&
	    job_argc > 0 && job_argv[0][0] == '/') {
		/* the batch script (in slurmd's spool) runs inside the container: its directory is mounted there */
		snprintf(script_dir, sizeof(script_dir), "%s", job_argv[0]);
		char *slash = strrchr(script_dir, '/');
		if (slash && slash != script_dir) {
			*slash = '\0';
			argv[k++] = "--bind-ro";
			argv[k++] = script_dir;
		}
	}
	argv[k] = NULL;
	char *err = NULL;
	int rc = run_helper(argv, &helper_out, &err);
	if (rc != 0) {
		char *why = last_line(err);
		if (why == NULL || *why == '\0')
			why = "slurmpod-container failed without a message";
		if (asprintf(&failure, "%s", why) < 0)
			failure = "containers: cannot start the container";
		free(err);
		return 0;  /* not here: a failing stepd init could look like a node problem; the tasks fail */
	}
	free(err);
	for (char *line = strtok(helper_out, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "pid ", 4) == 0)
			holder_pid = atoi(line + 4);
		else if (strncmp(line, "workdir ", 8) == 0)
			workdir = line + 8;
	}
	if (holder_pid <= 0)
		failure = "slurmpod-container: no container process";
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (!active || failure)
		return 0;  /* a failure ends the task in task_init (here slurmstepd still waits to unblock it) */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", holder_pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNS) < 0) {
		if (asprintf(&failure, "containers: cannot enter the container (%s): %s", path, strerror(errno)) < 0)
			failure = "containers: cannot enter the container";
		if (fd >= 0)
			close(fd);
		return 0;
	}
	close(fd);
	/* a mount namespace of the task's own (a copy of the container's) with a /proc of the node's PID namespace,
	 * which the task is in (the holder has a PID namespace of its own) */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		if (asprintf(&failure, "containers: cannot mount /proc in the container: %s", strerror(errno)) < 0)
			failure = "containers: cannot mount /proc in the container";
	}
	return 0;
}

/* the task ends with the message (slurmstepd would run it even when task_init returns an error) */
static void fail_task(spank_t sp, const char *msg)
{
	uint32_t local = 0;
	spank_get_item(sp, S_TASK_ID, &local);
	if (local == 0)
		slurm_error("%s", msg);
	fflush(NULL);
	_exit(1);
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t) strlen(text) ? 0 : -1;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!active)
		return 0;
	if (failure)
		fail_task(sp, failure);
	/* the image's environment (the helper left out --container-env names and SLURM_*) */
	for (char *p = helper_out; p && p < helper_out + MAX_OUT && *p; p += strlen(p) + 1) {
		if (strncmp(p, "env ", 4) != 0)
			continue;
		char *eq = strchr(p + 4, '=');
		if (eq == NULL)
			continue;
		*eq = '\0';
		spank_setenv(sp, p + 4, eq + 1, 1);
		*eq = '=';
	}
	if (opt_remap_root) {
		uid_t uid = getuid();
		gid_t gid = getgid();
		char map[64];
		char why[256];
		if (unshare(CLONE_NEWUSER) < 0) {
			snprintf(why, sizeof(why), "containers: --container-remap-root: cannot make a user namespace: %s",
				 strerror(errno));
			fail_task(sp, why);
		}
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);  /* cleared when slurmstepd changed our uid: /proc/self is root's */
		write_file("/proc/self/setgroups", "deny");
		snprintf(map, sizeof(map), "0 %u 1\n", (unsigned) uid);
		int a = write_file("/proc/self/uid_map", map);
		snprintf(map, sizeof(map), "0 %u 1\n", (unsigned) gid);
		if (a < 0 || write_file("/proc/self/gid_map", map) < 0) {
			snprintf(why, sizeof(why), "containers: --container-remap-root: cannot map uid %u to root: %s",
				 (unsigned) uid, strerror(errno));
			fail_task(sp, why);
		}
	}
	const char *dir = workdir && *workdir ? workdir : "/";
	if (chdir(dir) < 0) {
		char why[PATH_MAX + 128];
		snprintf(why, sizeof(why), "containers: --container-workdir: cannot enter %s in the container: %s", dir,
			 strerror(errno));
		fail_task(sp, why);
	}
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	uint32_t job = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	if (access(CONTAINER, X_OK) != 0)
		return 0;
	char sjob[16];
	snprintf(sjob, sizeof(sjob), "%u", job);
	char *argv[] = {"slurmpod-container", "cleanup", "--job", sjob, NULL};
	char *out = NULL, *err = NULL;
	run_helper(argv, &out, &err);
	free(out);
	free(err);
	return 0;
}
