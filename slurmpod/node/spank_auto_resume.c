/*
 * slurmpod's auto-resume SPANK plugin: HyperPod's `srun --auto-resume=1`.
 *
 * Built by slurmpod's node layer against each image's own <slurm/spank.h> (Debian's libslurm-dev) and listed
 * in the controller's plugstack.conf, which configless Slurm serves to every node.
 *
 *  - The option exists for srun only (local and remote contexts): `sbatch --auto-resume=1` and salloc fail with
 *    "unrecognized option", as on HyperPod.
 *  - In srun (local context), once options are parsed and before any step exists, an srun asked to auto-resume
 *    becomes slurmpod's supervisor: execv(AUTO_RESUME, "--", <srun's own argv>). The supervisor runs the same srun
 *    as its child (SLURMPOD_AUTO_RESUME_CHILD set, so this plugin lets it through), and when the step fails asks
 *    slurmpod's health agents whether a node of the job is faulty; if so it waits for the replacement and runs
 *    the step again in the same job (see slurmpod_node/auto_resume.py).
 *  - In every task (remote context) it prints HyperPod's line
 *    "[Auto Resume] Info: JobID: J StepID: S TaskID: T process_task_init".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(auto_resume, 1);

#define AUTO_RESUME "/usr/lib/slurmpod/bin/auto-resume"
#define CHILD_ENV "SLURMPOD_AUTO_RESUME_CHILD"
#define MAX_CMDLINE (1 << 20)

static int auto_resume = 0;

static int opt_cb(int val, const char *optarg, int remote)
{
	(void) val;
	(void) remote;
	if (optarg == NULL || (strcmp(optarg, "0") != 0 && strcmp(optarg, "1") != 0)) {
		slurm_error("auto-resume: --auto-resume takes 0 or 1, not '%s'", optarg ? optarg : "");
		return -1;
	}
	auto_resume = (optarg[0] == '1');
	return 0;
}

struct spank_option spank_options_reg[] = {
	{"auto-resume", "0|1",
	 "Retry this step in the same job when it fails on a faulty node: the node is replaced (same hostname) "
	 "and the step runs again (slurmpod, as SageMaker HyperPod). srun only.",
	 1, 0, (spank_opt_cb_f) opt_cb},
	SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	spank_context_t ctx = spank_context();
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
		return 0;  /* sbatch, salloc, slurmd: the option does not exist there */
	if (spank_option_register(sp, &spank_options_reg[0]) != ESPANK_SUCCESS) {
		slurm_error("auto-resume: cannot register --auto-resume");
		return -1;
	}
	return 0;
}

/* srun's own argv, from /proc/self/cmdline (NUL-separated); NULL on error */
static char **own_argv(void)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(MAX_CMDLINE);
	size_t len = 0;
	ssize_t n;
	while (buf && len < MAX_CMDLINE - 1 && (n = read(fd, buf + len, MAX_CMDLINE - 1 - len)) > 0)
		len += (size_t) n;
	close(fd);
	if (!buf || len == 0) {
		free(buf);
		return NULL;
	}
	buf[len] = '\0';
	size_t count = 0;
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\0')
			count++;
	if (buf[len - 1] != '\0')
		count++;
	char **argv = calloc(count + 3, sizeof(char *));
	if (!argv) {
		free(buf);
		return NULL;
	}
	size_t k = 0;
	argv[k++] = "auto-resume";
	argv[k++] = "--";
	for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
		argv[k++] = buf + i;
	argv[k] = NULL;
	return argv;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() != S_CTX_LOCAL || !auto_resume || getenv(CHILD_ENV) != NULL)
		return 0;
	if (getenv("SLURM_JOB_ID") == NULL) {
		slurm_info("[Auto Resume] Warning: --auto-resume=1 works inside an allocation (sbatch or salloc): "
			   "this step runs without it");
		return 0;
	}
	char **argv = own_argv();
	if (argv == NULL) {
		slurm_error("[Auto Resume] Error: cannot read srun's command line: %s; this step runs without "
			    "auto-resume", strerror(errno));
		return 0;
	}
	fflush(NULL);
	execv(AUTO_RESUME, argv);
	/* still here: the step runs as a plain srun */
	slurm_error("[Auto Resume] Error: cannot run %s: %s; this step runs without auto-resume", AUTO_RESUME,
		    strerror(errno));
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!auto_resume)
		return 0;
	uint32_t job = 0, step = 0, task = 0;
	spank_get_item(sp, S_JOB_ID, &job);
	spank_get_item(sp, S_JOB_STEPID, &step);
	spank_get_item(sp, S_TASK_GLOBAL_ID, &task);
	fprintf(stdout, "[Auto Resume] Info: JobID: %u StepID: %u TaskID: %u process_task_init\n", job, step, task);
	fflush(stdout);
	return 0;
}
