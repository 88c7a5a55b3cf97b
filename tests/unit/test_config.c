/* Unit tests of the configuration loader: the shipped configs, base chains,
 * overrides of every type, the write/read round trip, and the messages of
 * every kind of mistake a user can make. */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../trainer/config/config.h"
#include "../../trainer/config/config_schema.h"
#include "../../trainer/backend/backend.h"
#include "../../trainer/config/config_source.h"
#include "../../trainer/config/config_suggest.h"
#include "../check.h"

static char tmp_dir[256];

/* Write `text` to <tmp_dir>/<name>; the path goes to a static buffer ring. */
static const char *write_file(const char *name, const char *text)
{
    static char ring[8][512];
    static int next;
    char *path = ring[next++ % 8];
    snprintf(path, 512, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load a file written with write_file; returns config_load's result. */
static int load_text(moe_config *cfg, const char *name, const char *text, moe_err *e)
{
    const char *path = write_file(name, text);
    return config_load(cfg, path, NULL, 0, NULL, e);
}

static int has(const moe_err *e, const char *needle)
{
    return strstr(e->msg, needle) != NULL;
}

#define CHECK_ERR(call, e, ...)                                                              \
    do {                                                                                     \
        (e).msg[0] = '\0';                                                                   \
        int rc_ = (call);                                                                    \
        CHECK_MSG(rc_ == -1, "expected failure of %s", #call);                               \
        const char *needles_[] = {__VA_ARGS__};                                              \
        for (size_t i_ = 0; i_ < sizeof needles_ / sizeof needles_[0]; i_++)                 \
            CHECK_MSG(has(&(e), needles_[i_]), "message lacks \"%s\": %s", needles_[i_],     \
                      (e).msg);                                                              \
    } while (0)

/* Equal configs apart from where they were loaded from. */
static int same_settings(const moe_config *a, const moe_config *b)
{
    moe_config x = *a, y = *b;
    memset(x.name, 0, sizeof x.name);
    memset(y.name, 0, sizeof y.name);
    memset(x.path, 0, sizeof x.path);
    memset(y.path, 0, sizeof y.path);
    x.model_explicit = y.model_explicit = 0; /* where keys were set, not what they are */
    return memcmp(&x, &y, sizeof x) == 0;
}

static moe_config cfg, other; /* large: keep them off the stack */

static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *ent; d && (ent = readdir(d));)
        n += strncmp(ent->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- the schema and the shipped configs ------------------------------- */

static void test_schema_table(void)
{
    moe_err e;
    CHECK(config_key_count > 40);
    for (size_t i = 0; i < config_key_count; i++) {
        const config_key *k = &config_keys[i];
        CHECK_MSG(strchr(k->path, '.') && k->doc && k->doc[0] && k->def, "row %s", k->path);
        CHECK(config_key_find(k->path) == k); /* unique paths */
        moe_config c;
        memset(&c, 0, sizeof c);
        CHECK_MSG(config_key_set_text(k, &c, k->def, &e) == 0, "default of %s: %s", k->path,
                  e.msg);
        CHECK_MSG(config_key_check(k, &c, &e) == 0, "default of %s: %s", k->path, e.msg);
        /* rows of a group are contiguous, so config_save emits each group once */
        size_t g = (size_t)(strchr(k->path, '.') - k->path);
        for (size_t j = i + 1; j < config_key_count; j++) {
            int same = strncmp(config_keys[j].path, k->path, g + 1) == 0;
            int prev_same = strncmp(config_keys[j - 1].path, k->path, g + 1) == 0;
            CHECK_MSG(!same || prev_same, "group of %s is split by %s", k->path,
                      config_keys[j - 1].path);
        }
    }
    CHECK(config_key_find("model.nope") == NULL);
    CHECK(config_group_known("model") && config_group_known("runtime"));
    CHECK(!config_group_known("mode") && !config_group_known("model.hidden_size"));
    config_defaults(&cfg);
    CHECK_MSG(config_validate(&cfg, &e) == 0, "%s", e.msg);
    CHECK(cfg.model.vocab_size == 256 && cfg.train.seed == 42 && cfg.optimizer.beta2 == 0.95);
    CHECK(cfg.data.n_files == 1 && strcmp(cfg.data.files[0], "lambda_virus.fa.gz") == 0);
    CHECK(cfg.precision.compute == MOE_PREC_AUTO && cfg.runtime.backend == MOE_BACKEND_AUTO);
}

static void test_precision_names(void)
{
    moe_precision p = MOE_PREC_AUTO;
    for (int i = MOE_PREC_AUTO; i <= MOE_PREC_MXFP8_EMULATED; i++) {
        CHECK(precision_parse(precision_name((moe_precision)i), &p) == 0);
        CHECK(p == (moe_precision)i);
    }
    CHECK(strcmp(precision_name(MOE_PREC_MXFP8), "mxfp8") == 0);
    CHECK(strcmp(precision_name(MOE_PREC_FP8_BLOCK), "fp8_block") == 0);
    CHECK(strcmp(precision_name((moe_precision)99), "invalid") == 0);
    CHECK(precision_parse("fp16", &p) == -1);
}

static void test_shipped_configs(void)
{
    moe_err e;
    const char *names[] = {"defaults",         "L0_sanity",     "L1_8x7B_ep",
                           "bench_8x7B_2L",    "bench_8x7B_2L_genomic", "accuracy_mid",
                           "accuracy_large"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int rc = config_load(&cfg, names[i], MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e);
        CHECK_MSG(rc == 0, "%s: %s", names[i], e.msg);
        if (rc == 0) {
            CHECK(strcmp(cfg.name, names[i]) == 0);
            CHECK(strstr(cfg.path, names[i]) && strstr(cfg.path, ".cfg"));
            CHECK_MSG(config_validate(&cfg, &e) == 0, "%s: %s", names[i], e.msg);
        }
    }

    CHECK(config_load(&cfg, "L0_sanity", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0);
    CHECK(cfg.model.hidden_size == 64 && cfg.model.num_layers == 2 && cfg.model.head_dim == 16);
    CHECK(cfg.model.num_experts == 4 && cfg.model.top_k == 2 && cfg.train.seq_length == 128);
    CHECK(cfg.train.steps == 300 && cfg.scheduler.warmup_steps == 30);
    CHECK(cfg.parallel.ep == 2 && cfg.parallel.dp == 1 && cfg.logger.frequency == 20);
    CHECK(cfg.checkpoint.save_every_n_steps == 100 && cfg.checkpoint.ckpt_dir[0] == '\0');
    CHECK(cfg.model.rope_theta == 1e6 && cfg.optimizer.weight_decay == 0.1); /* from defaults */

    CHECK(config_load(&cfg, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0);
    CHECK(cfg.model.hidden_size == 4096 && cfg.model.num_layers == 32);
    CHECK(cfg.model.num_kv_heads == 8 && cfg.model.intermediate_size == 14336);
    CHECK(cfg.precision.compute == MOE_PREC_MXFP8 && cfg.parallel.ep == 8);
    CHECK(cfg.checkpoint.resume_from_checkpoint == 1 && cfg.train.activation_recompute == 1);
    CHECK(strcmp(cfg.checkpoint.ckpt_dir, "checkpoints/L1_8x7B_ep") == 0);
    CHECK(cfg.data.n_files == 2 && strcmp(cfg.data.files[0], "ecoli_536.fna.gz") == 0 &&
          strcmp(cfg.data.files[1], "lambda_virus.fa.gz") == 0);

    CHECK(config_load(&cfg, "bench_8x7B_2L_genomic", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0);
    CHECK(cfg.model.vocab_size == 256 && cfg.train.seq_length == 8192);
    CHECK(cfg.train.micro_batch_size == 1);
    /* inherited from bench_8x7B_2L */
    CHECK(cfg.model.num_layers == 2 && cfg.train.steps == 20 &&
          cfg.precision.compute == MOE_PREC_BF16);
}

/* defaults.cfg documents the built-in defaults: same values, every key. */
static void test_defaults_file_is_complete(void)
{
    moe_err e;
    CHECK(config_load(&cfg, "defaults", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0);
    config_defaults(&other);
    CHECK(same_settings(&cfg, &other));

    /* an empty file without a base gives the built-in defaults */
    CHECK_MSG(load_text(&other, "empty.cfg", "# nothing set\n", &e) == 0, "%s", e.msg);
    CHECK(same_settings(&cfg, &other) && strcmp(other.name, "empty") == 0);

    config_t c;
    config_init(&c);
    CHECK(config_read_file(&c, MOE_CONFIG_DIR_DEFAULT "/defaults.cfg") == CONFIG_TRUE);
    for (size_t i = 0; i < config_key_count; i++)
        CHECK_MSG(config_lookup(&c, config_keys[i].path) != NULL,
                  "defaults.cfg does not set %s", config_keys[i].path);
    config_destroy(&c);
}

/* ---- inheritance ------------------------------------------------------ */

static void test_base_chain(void)
{
    moe_err e;
    write_file("parent.cfg", "model = { hidden_size = 128; num_layers = 3; "
                             "max_position_embeddings = 4096; };\n"
                             "train = { steps = 500; };\n"
                             "scheduler = { warmup_steps = 50; };\n");
    write_file("child.cfg", "base = \"parent\";\n"
                            "train = { steps = 100; seq_length = 256; };\n");
    const char *path = write_file("grandchild.cfg", "base = \"child.cfg\";\n"
                                                    "model = { num_layers = 5; };\n");
    int rc = config_load(&cfg, path, NULL, 0, NULL, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(cfg.model.hidden_size == 128);     /* parent */
    CHECK(cfg.scheduler.warmup_steps == 50); /* parent */
    CHECK(cfg.train.steps == 100);           /* child over parent */
    CHECK(cfg.train.seq_length == 256);      /* child */
    CHECK(cfg.model.num_layers == 5);        /* grandchild over parent */
    CHECK(cfg.model.num_heads == 8);         /* built-in default */
    CHECK(strcmp(cfg.name, "grandchild") == 0 && strcmp(cfg.path, path) == 0);

    /* each file is valid alone, the whole is not: the message says which file
     * set each key of the broken rule */
    write_file("child.cfg", "base = \"parent\";\n"
                            "train = {\n  seq_length = 8192;\n};\n");
    CHECK_ERR(config_load(&cfg, path, NULL, 0, NULL, &e), e, "config grandchild:",
              "train.seq_length = 8192 exceeds model.max_position_embeddings = 4096",
              "train.seq_length from ", "child.cfg:3", "model.max_position_embeddings from ",
              "parent.cfg:1");

    /* a base given as a path: relative to the child's directory, or absolute */
    char sub[400];
    snprintf(sub, sizeof sub, "%s/sub", tmp_dir);
    mkdir(sub, 0755);
    path = write_file("sub/rel.cfg", "base = \"../parent.cfg\";\n"
                                     "scheduler = { warmup_steps = 0; };\n");
    CHECK_MSG(config_load(&cfg, path, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(cfg.model.hidden_size == 128 && cfg.model.num_layers == 3);
    char text[700];
    snprintf(text, sizeof text, "base = \"%s/parent.cfg\";\nmodel = { num_layers = 7; };\n",
             tmp_dir);
    path = write_file("sub/abs.cfg", text);
    CHECK_MSG(config_load(&cfg, path, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(cfg.model.hidden_size == 128 && cfg.model.num_layers == 7);
}

static void test_base_errors(void)
{
    moe_err e;
    write_file("cycle_a.cfg", "base = \"cycle_b\";\n");
    write_file("cycle_b.cfg", "base = \"cycle_a\";\n");
    CHECK_ERR(config_load(&cfg, write_file("cycle_a.cfg", "base = \"cycle_b\";\n"), NULL, 0,
                          NULL, &e),
              e, "base cycle", "cycle_a.cfg -> ", "cycle_b.cfg -> ");
    CHECK_ERR(load_text(&cfg, "self.cfg", "base = \"self\";\n", &e), e, "base cycle",
              "self.cfg");

    CHECK_ERR(load_text(&cfg, "orphan.cfg", "\n\nbase = \"no_such_parent\";\n", &e), e,
              "orphan.cfg:3", "no_such_parent", "No such file");

    /* with checkpoint.init_from, the model keys set where init_from is set or
     * later are the run's own (compared with config.json); a base's are not */
    write_file("ft_base.cfg", "model = { num_layers = 3; hidden_size = 96; };\n");
    const char *ft = write_file("ft.cfg", "base = \"ft_base\";\n"
                                          "checkpoint = { init_from = \"/models/x\"; };\n"
                                          "model = { num_layers = 5; };\n");
    char *ft_over[] = {"model.rope_theta=5e5"};
    CHECK_MSG(config_load(&cfg, ft, NULL, 1, ft_over, &e) == 0, "%s", e.msg);
    CHECK(config_model_key_explicit(&cfg, "model.num_layers"));
    CHECK(config_model_key_explicit(&cfg, "model.rope_theta"));
    CHECK(!config_model_key_explicit(&cfg, "model.hidden_size"));
    CHECK(!config_model_key_explicit(&cfg, "model.vocab_size"));
    CHECK(!config_model_key_explicit(&cfg, "train.steps"));
    char *ft_cmd[] = {"checkpoint.init_from=/models/y", "model.top_k=1"};
    CHECK_MSG(config_load(&cfg, ft, NULL, 2, ft_cmd, &e) == 0, "%s", e.msg);
    CHECK(config_model_key_explicit(&cfg, "model.top_k"));
    CHECK(!config_model_key_explicit(&cfg, "model.num_layers")); /* before the command line */

    /* a config copied out of the configs directory finds base = "defaults"
     * there (the configs directory given, or the default one) */
    const char *copied = write_file("copied_L0.cfg", "base = \"defaults\";\n"
                                                     "model = { num_layers = 3; };\n");
    CHECK_MSG(config_load(&cfg, copied, MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(cfg.model.num_layers == 3);
    CHECK_MSG(config_load(&cfg, copied, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    /* a parent neither beside the child nor in the configs directory: both named */
    CHECK_ERR(config_load(&cfg, write_file("orphan2.cfg", "base = \"no_parent2\";\n"),
                          MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e),
              e, "orphan2.cfg:1", "no_parent2", "nor in " MOE_CONFIG_DIR_DEFAULT);
    CHECK_ERR(load_text(&cfg, "basetype.cfg", "base = 3;\n", &e), e, "basetype.cfg:1", "base",
              "expected a string", "found an integer");
    CHECK_ERR(load_text(&cfg, "baseempty.cfg", "base = \"\";\n", &e), e, "baseempty.cfg:1",
              "base is empty");

    /* a chain deeper than the limit */
    for (int i = 0; i < 20; i++) {
        char name[32], text[64];
        snprintf(name, sizeof name, "deep%d.cfg", i);
        if (i == 19)
            snprintf(text, sizeof text, "model = { num_layers = 1; };\n");
        else
            snprintf(text, sizeof text, "base = \"deep%d\";\n", i + 1);
        write_file(name, text);
    }
    CHECK_ERR(config_load(&cfg, write_file("deep0.cfg", "base = \"deep1\";\n"), NULL, 0, NULL,
                          &e),
              e, "base chain longer than 16 files", "deep0.cfg -> ");
    /* an error deep in the chain names the file it is in */
    write_file("bad_parent.cfg", "model = { hidden_size = };\n");
    CHECK_ERR(load_text(&cfg, "good_child.cfg", "base = \"bad_parent\";\n", &e), e,
              "bad_parent.cfg:1", "syntax error");
}

/* ---- errors in files -------------------------------------------------- */

static void test_file_errors(void)
{
    moe_err e;
    CHECK_ERR(load_text(&cfg, "syntax.cfg", "model = {\n  hidden_size = 64;\n  top_k = ;\n};\n",
                        &e),
              e, "syntax.cfg:3", "syntax error");
    CHECK_ERR(load_text(&cfg, "dup.cfg", "model = { top_k = 1;\n top_k = 2; };\n", &e), e,
              "dup.cfg:2", "duplicate");
    CHECK_ERR(load_text(&cfg, "unknown_key.cfg", "model = {\n  hiden_size = 64;\n};\n", &e), e,
              "unknown_key.cfg:2", "unknown key 'model.hiden_size'",
              "did you mean 'model.hidden_size'");
    CHECK_ERR(load_text(&cfg, "wrong_group.cfg", "train = { lr = 0.1; };\n", &e), e,
              "wrong_group.cfg:1", "unknown key 'train.lr'", "did you mean 'optimizer.lr'");
    CHECK_ERR(load_text(&cfg, "floor.cfg", "checkpoint = {\n  min_write_mb_per_s = 0.0;\n};\n",
                        &e),
              e, "floor.cfg:2", "checkpoint.min_write_mb_per_s = 0 is out of range", "> 0");
    CHECK_ERR(load_text(&cfg, "far.cfg", "model = { flux_capacitor = 1; };\n", &e), e,
              "unknown key 'model.flux_capacitor'");
    CHECK_MSG(!has(&e, "did you mean"), "no wild guesses: %s", e.msg);
    CHECK_ERR(load_text(&cfg, "unknown_group.cfg", "\nmodle = { hidden_size = 64; };\n", &e), e,
              "unknown_group.cfg:2", "unknown group 'modle'", "did you mean 'model'");
    CHECK_ERR(load_text(&cfg, "root_key.cfg", "seed = 7;\n", &e), e, "root_key.cfg:1",
              "unknown key 'seed'", "did you mean 'train.seed'");
    CHECK_ERR(load_text(&cfg, "nested.cfg", "model = { moe = { top_k = 1; }; };\n", &e), e,
              "unknown group 'model.moe'");
    CHECK_ERR(load_text(&cfg, "scalar_group.cfg", "model = 5;\n", &e), e, "scalar_group.cfg:1",
              "model must be a group", "found an integer");

    /* wrong types: the key, the type expected, the type found */
    CHECK_ERR(load_text(&cfg, "t1.cfg", "model = { hidden_size = 64.5; };\n", &e), e, "t1.cfg:1",
              "model.hidden_size", "expected an integer", "found a float (64.5)");
    CHECK_ERR(load_text(&cfg, "t2.cfg", "model = {\n hidden_size = \"64\"; };\n", &e), e,
              "t2.cfg:2", "model.hidden_size", "expected an integer", "found a string");
    CHECK_ERR(load_text(&cfg, "t3.cfg", "data = { shuffle = 1; };\n", &e), e, "t3.cfg:1",
              "data.shuffle", "expected a bool", "found an integer");
    CHECK_ERR(load_text(&cfg, "t4.cfg", "logger = { run_dir = true; };\n", &e), e,
              "logger.run_dir", "expected a string", "found a bool");
    CHECK_ERR(load_text(&cfg, "t5.cfg", "optimizer = { betas = 0.9; };\n", &e), e,
              "optimizer.betas", "expected a pair of numbers", "found a float");
    CHECK_ERR(load_text(&cfg, "t6.cfg", "optimizer = { betas = [0.9, 0.95, 0.99]; };\n", &e), e,
              "optimizer.betas", "found 3 values");
    CHECK_ERR(load_text(&cfg, "t7.cfg", "optimizer = { betas = (0.9, \"x\"); };\n", &e), e,
              "optimizer.betas[1]", "expected a number", "found a string");
    CHECK_ERR(load_text(&cfg, "t8.cfg", "data = { files = (\"a.fa\", 3); };\n", &e), e,
              "data.files[1]", "expected a string", "found an integer");
    CHECK_ERR(load_text(&cfg, "t9.cfg", "train = { seed = 4.2; };\n", &e), e, "train.seed",
              "expected an integer", "found a float");
    CHECK_ERR(load_text(&cfg, "t10.cfg", "model = { top_k = { }; };\n", &e), e,
              "model.top_k", "expected an integer", "found a group");

    /* out of range: the key and what is allowed */
    CHECK_ERR(load_text(&cfg, "r1.cfg", "\n\nmodel = { top_k = 0; };\n", &e), e, "r1.cfg:3",
              "model.top_k = 0 is out of range", "allowed >= 1");
    CHECK_ERR(load_text(&cfg, "r2.cfg", "optimizer = { betas = [0.9, 1.0]; };\n", &e), e,
              "optimizer.betas[1] = 1 is out of range", "[0, 1)");
    CHECK_ERR(load_text(&cfg, "r3.cfg", "optimizer = { lr = 0; };\n", &e), e,
              "optimizer.lr = 0 is out of range", "allowed > 0");
    CHECK_ERR(load_text(&cfg, "r4.cfg", "precision = { compute = \"mxfp9\"; };\n", &e), e,
              "r4.cfg:1", "precision.compute", "'mxfp9' is not one of auto, fp32, bf16",
              "did you mean 'mxfp8'");
    CHECK_ERR(load_text(&cfg, "r5.cfg", "runtime = { backend = \"gpu\"; };\n", &e), e,
              "runtime.backend", "auto, cpu, cuda");
    CHECK_ERR(load_text(&cfg, "r6.cfg", "train = { seed = -1; };\n", &e), e,
              "train.seed = -1 is out of range", "0..9223372036854775807");
    CHECK_ERR(load_text(&cfg, "r7.cfg", "model = { rope_theta = 1e999; };\n", &e), e,
              "model.rope_theta = inf is out of range");
    CHECK_ERR(load_text(&cfg, "r8.cfg", "data = { files = []; };\n", &e), e,
              "data.files is empty");
    CHECK_ERR(load_text(&cfg, "r9.cfg", "data = { files = [\"\"]; };\n", &e), e,
              "data.files[0] is an empty path");

    /* integers that libconfig 1.5 would silently truncate */
    CHECK_ERR(load_text(&cfg, "big.cfg", "train = {\n  seed = 5000000000;\n};\n", &e), e,
              "big.cfg:2", "5000000000 does not fit in 32 bits", "L suffix");
    CHECK_ERR(load_text(&cfg, "big64.cfg", "train = { seed = 99999999999999999999L; };\n", &e),
              e, "does not fit in 64 bits");
    CHECK_ERR(load_text(&cfg, "include.cfg", "@include \"other.cfg\"\n", &e), e,
              "include.cfg:1", "@include is not supported", "base =");

    CHECK_ERR(config_load(&cfg, "/nonexistent/dir/x.cfg", NULL, 0, NULL, &e), e,
              "/nonexistent/dir/x.cfg", "No such file");
    CHECK_ERR(config_load(&cfg, tmp_dir, NULL, 0, NULL, &e), e, "is not a regular file");
    CHECK_ERR(config_load(&cfg, "", NULL, 0, NULL, &e), e, "no config given");
}

/* data.store and data.blend in a file, written back and loaded again */
static void test_store_and_blend(void)
{
    moe_err e;
    CHECK_MSG(load_text(&cfg, "blend.cfg",
                        "data = { blend = ( { store = \"/s/a\"; weight = 0.7; },\n"
                        "                   { store = \"b\"; weight = 1; } ); };\n", &e) == 0,
              "%s", e.msg);
    CHECK(cfg.data.n_blend == 2 && strcmp(cfg.data.blend[0].store, "/s/a") == 0 &&
          cfg.data.blend[0].weight == 0.7 && cfg.data.blend[1].weight == 1.0);
    const char *saved = write_file("saved_blend.cfg", "");
    CHECK(config_save(&cfg, saved, &e) == 0);
    CHECK_MSG(config_load(&other, saved, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(same_settings(&cfg, &other));
    CHECK_ERR(load_text(&cfg, "blend2.cfg", "data = { blend = ( { store = \"a\"; } ); };\n", &e),
              e, "blend2.cfg:1", "data.blend[0]", "store", "weight");
    CHECK_ERR(load_text(&cfg, "blend3.cfg", "data = { blend = \"a\"; };\n", &e), e,
              "blend3.cfg:1", "data.blend");
    CHECK_MSG(load_text(&cfg, "store.cfg", "data = { store = \"/scratch/og2\"; };\n", &e) == 0,
              "%s", e.msg);
    CHECK(strcmp(cfg.data.store, "/scratch/og2") == 0 && cfg.data.n_blend == 0);
}

static void test_file_values_accepted(void)
{
    moe_err e;
    int rc = load_text(&cfg, "ok.cfg",
                       "// comments of all three kinds\n"
                       "/* 5000000000 in a comment is no number */\n"
                       "model = { rope_theta = 10000; rms_norm_eps = 1e-6; }; # int as float\n"
                       "train = { seed = 5000000000L; };\n"
                       "optimizer = { betas = (0.8, 0.99); lr = .5e-3; };\n"
                       "data = { files = \"one.fa\"; stride = 0x40; };\n"
                       "logger = { run_dir = \"runs/99999999999\"; };\n"
                       "precision = { compute = \"BF16\"; };\n",
                       &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(cfg.model.rope_theta == 10000.0 && cfg.model.rms_norm_eps == 1e-6);
    CHECK(cfg.train.seed == 5000000000ULL);
    CHECK(cfg.optimizer.beta1 == 0.8 && cfg.optimizer.beta2 == 0.99 &&
          cfg.optimizer.lr == 0.5e-3);
    CHECK(cfg.data.n_files == 1 && strcmp(cfg.data.files[0], "one.fa") == 0);
    CHECK(cfg.data.stride == 64);
    CHECK(strcmp(cfg.logger.run_dir, "runs/99999999999") == 0);
    CHECK(cfg.precision.compute == MOE_PREC_BF16);

    /* a failed load leaves the caller's struct as it was */
    moe_config before = cfg;
    CHECK(load_text(&cfg, "bad.cfg", "model = { top_k = 100; };\n", &e) == -1);
    CHECK(memcmp(&before, &cfg, sizeof cfg) == 0);
}

/* ---- overrides -------------------------------------------------------- */

static void test_overrides(void)
{
    moe_err e;
    char *ov[] = {
        "model.hidden_size=128",
        "train.seed=9223372036854775807",
        "model.rope_theta=5e5",
        "optimizer.lr=1",
        "train.activation_recompute=yes",
        "data.shuffle=0",
        "checkpoint.resume_from_checkpoint=TRUE",
        "checkpoint.ckpt_dir=/scratch/a=b,c",
        "logger.run_dir=",
        "optimizer.betas=[0.8, 0.9]",
        "data.files=[a.fa, \"b.fa.gz\"]",
        "precision.compute=fp8_block",
        "precision.layers=all",
        "runtime.backend=CPU",
        "train.steps=+3000",
    };
    int rc = config_load(&cfg, "L0_sanity", MOE_CONFIG_DIR_DEFAULT, sizeof ov / sizeof ov[0],
                         ov, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    CHECK(cfg.model.hidden_size == 128 && cfg.train.seed == 9223372036854775807ULL);
    CHECK(cfg.model.rope_theta == 5e5 && cfg.optimizer.lr == 1.0);
    CHECK(cfg.train.activation_recompute == 1 && cfg.data.shuffle == 0);
    CHECK(cfg.checkpoint.resume_from_checkpoint == 1);
    CHECK(strcmp(cfg.checkpoint.ckpt_dir, "/scratch/a=b,c") == 0);
    CHECK(cfg.logger.run_dir[0] == '\0');
    CHECK(cfg.optimizer.beta1 == 0.8 && cfg.optimizer.beta2 == 0.9);
    CHECK(cfg.data.n_files == 2 && strcmp(cfg.data.files[0], "a.fa") == 0 &&
          strcmp(cfg.data.files[1], "b.fa.gz") == 0);
    CHECK(cfg.precision.compute == MOE_PREC_FP8_BLOCK);
    CHECK(cfg.precision.layers == MOE_LAYERS_ALL && cfg.runtime.backend == MOE_BACKEND_CPU);
    CHECK(cfg.train.steps == 3000);

    /* the other list and pair spellings, one at a time on a plain struct */
    config_defaults(&cfg);
    CHECK(config_apply_override(&cfg, "optimizer.betas=0.85,0.97", &e) == 0);
    CHECK(cfg.optimizer.beta1 == 0.85 && cfg.optimizer.beta2 == 0.97);
    CHECK(config_apply_override(&cfg, "data.files=x.fa,y.fa,z.fa", &e) == 0);
    CHECK(cfg.data.n_files == 3 && strcmp(cfg.data.files[2], "z.fa") == 0);
    CHECK(config_apply_override(&cfg, "data.files=/data/only.fa", &e) == 0);
    CHECK(cfg.data.n_files == 1 && strcmp(cfg.data.files[0], "/data/only.fa") == 0);
    /* equal lists are one copy, so equal configs stay equal bytes */
    const char *const *only = cfg.data.files;
    CHECK(config_apply_override(&cfg, "data.files=[\"/data/only.fa\"]", &e) == 0);
    CHECK(cfg.data.files == only);
    /* no fixed cap on the count (it was 16) */
    static char many[8 * 3000 + 16] = "data.files=";
    char *w = many + strlen(many);
    for (int i = 0; i < 3000; i++)
        w += sprintf(w, "%s%d.fa", i ? "," : "", i % 1000);
    CHECK(config_apply_override(&cfg, many, &e) == 0);
    CHECK(cfg.data.n_files == 3000 && strcmp(cfg.data.files[2999], "999.fa") == 0);
    /* data.blend from an override: STORE:WEIGHT pairs */
    CHECK(config_apply_override(&cfg, "data.blend=a/s1:0.7,b:c/s2:0.3", &e) == 0);
    CHECK(cfg.data.n_blend == 2 && strcmp(cfg.data.blend[1].store, "b:c/s2") == 0 &&
          cfg.data.blend[0].weight == 0.7);
    CHECK_ERR(config_apply_override(&cfg, "data.blend=a:0", &e), e, "data.blend[0].weight", "> 0");
    CHECK_ERR(config_apply_override(&cfg, "data.blend=a", &e), e, "data.blend[0]", "STORE:WEIGHT");
    CHECK(config_apply_override(&cfg, "train.activation_recompute=false", &e) == 0);
    CHECK(cfg.train.activation_recompute == 0);
    CHECK(config_apply_override(&cfg, "data.mask_degenerate_bases=no", &e) == 0);
    CHECK(cfg.data.mask_degenerate_bases == 0);
    CHECK(config_apply_override(&cfg, "train.grad_clip=0", &e) == 0 && cfg.train.grad_clip == 0);
}

static void test_override_errors(void)
{
    moe_err e;
    config_defaults(&cfg);
    CHECK_ERR(config_apply_override(&cfg, "model.hidden_size", &e), e,
              "override 'model.hidden_size'", "expected key=value");
    CHECK_ERR(config_apply_override(&cfg, "=64", &e), e, "override '=64'", "key", "empty");
    CHECK_ERR(config_apply_override(&cfg, "model.hiden_size=64", &e), e,
              "override 'model.hiden_size=64'", "unknown key 'model.hiden_size'",
              "did you mean 'model.hidden_size'");
    CHECK_ERR(config_apply_override(&cfg, "model=64", &e), e, "model is a group",
              "model.hidden_size=");
    CHECK_ERR(config_apply_override(&cfg, "base=defaults", &e), e, "unknown key 'base'");

    CHECK_ERR(config_apply_override(&cfg, "model.top_k=12x", &e), e,
              "override 'model.top_k=12x'", "'12x' is not an integer");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=", &e), e, "'' is not an integer");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k= 2", &e), e, "not an integer");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=0x10", &e), e, "not an integer");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=1.5", &e), e, "not an integer");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=99999999999999999999", &e), e,
              "does not fit in 64 bits");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=3000000000", &e), e,
              "model.top_k = 3000000000 is out of range", "allowed >= 1");
    CHECK_ERR(config_apply_override(&cfg, "model.top_k=0", &e), e,
              "model.top_k = 0 is out of range");
    CHECK_ERR(config_apply_override(&cfg, "runtime.threads=65536", &e), e,
              "runtime.threads = 65536 is out of range", "0..1024");
    config_defaults(&other);
    CHECK(config_apply_override(&other, "runtime.threads=1024", &e) == 0);
    CHECK_ERR(config_apply_override(&cfg, "train.seed=-1", &e), e,
              "train.seed = -1 is out of range");
    CHECK_ERR(config_apply_override(&cfg, "train.seed=18446744073709551615", &e), e,
              "out of range", "0..9223372036854775807");
    CHECK_ERR(config_apply_override(&cfg, "train.seed=42L", &e), e, "not an integer");

    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=abc", &e), e, "'abc' is not a number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=1e-3x", &e), e, "not a number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=nan", &e), e, "not a finite number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=inf", &e), e, "not a finite number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=1e999", &e), e, "not a finite number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.lr=-0.1", &e), e,
              "optimizer.lr = -0.1 is out of range", "> 0");
    CHECK_ERR(config_apply_override(&cfg, "scheduler.min_lr_ratio=1.5", &e), e,
              "scheduler.min_lr_ratio = 1.5 is out of range", "[0, 1]");
    /* the checkpoint bandwidth floor divides the bytes a save waits for: > 0 */
    CHECK_ERR(config_apply_override(&cfg, "checkpoint.min_write_mb_per_s=0", &e), e,
              "checkpoint.min_write_mb_per_s = 0 is out of range", "> 0");
    CHECK_ERR(config_apply_override(&cfg, "checkpoint.min_write_mb_per_s=-50", &e), e,
              "checkpoint.min_write_mb_per_s = -50 is out of range", "> 0");
    CHECK_ERR(config_apply_override(&cfg, "checkpoint.min_write_mb_per_s=fast", &e), e,
              "'fast' is not a number");
    CHECK_ERR(config_apply_override(&cfg, "checkpoint.min_write_mb_per_s=inf", &e), e,
              "not a finite number");
    config_defaults(&other);
    CHECK(config_apply_override(&other, "checkpoint.min_write_mb_per_s=0.5", &e) == 0 &&
          other.checkpoint.min_write_mb_per_s == 0.5);

    CHECK_ERR(config_apply_override(&cfg, "data.shuffle=maybe", &e), e,
              "'maybe' is not a bool", "true/false");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.betas=0.9", &e), e,
              "not a pair of numbers");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.betas=0.9,0.95,0.99", &e), e,
              "not a pair of numbers");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.betas=0.9,", &e), e,
              "optimizer.betas[1]", "not a number");
    CHECK_ERR(config_apply_override(&cfg, "optimizer.betas=[0.9,1.0]", &e), e,
              "optimizer.betas[1] = 1 is out of range", "[0, 1)");
    CHECK_ERR(config_apply_override(&cfg, "data.files=", &e), e, "at least one path");
    CHECK_ERR(config_apply_override(&cfg, "data.files=[]", &e), e, "at least one path");
    CHECK_ERR(config_apply_override(&cfg, "data.files=a,,b", &e), e, "data.files[1] is empty");
    CHECK_ERR(config_apply_override(&cfg, "data.files=a,", &e), e, "data.files[1] is empty");
    CHECK_ERR(config_apply_override(&cfg, "data.blend=a:x", &e), e, "data.blend[0]",
              "STORE:WEIGHT");
    CHECK_ERR(config_apply_override(&cfg, "precision.compute=mxfp", &e), e,
              "'mxfp' is not one of", "did you mean 'mxfp8'");
    CHECK_ERR(config_apply_override(&cfg, "precision.layers=some", &e), e,
              "precision.layers", "experts, all");

    static char long_override[MOE_PATH_MAX + 64];
    int n = snprintf(long_override, sizeof long_override, "checkpoint.ckpt_dir=");
    memset(long_override + n, 'x', MOE_PATH_MAX);
    CHECK_ERR(config_apply_override(&cfg, long_override, &e), e,
              "checkpoint.ckpt_dir is 4096 characters long", "at most 4095");

    /* failed overrides changed nothing */
    config_defaults(&other);
    CHECK(same_settings(&cfg, &other));

    /* through config_load, the message names the override */
    char *bad[] = {"train.steps=100", "model.num_experts=3"};
    CHECK_ERR(config_load(&cfg, "L0_sanity", MOE_CONFIG_DIR_DEFAULT, 2, bad, &e), e,
              "parallel.ep = 2 must divide model.num_experts = 3",
              "model.num_experts from override 'model.num_experts=3'", "L0_sanity.cfg:");
}

/* ---- validation ------------------------------------------------------- */

static void test_validation_rules(void)
{
    moe_err e;
    struct {
        const char *overrides[3];
        const char *needle[2];
    } cases[] = {
        {{"model.num_heads=8", "model.num_kv_heads=3"},
         {"model.num_kv_heads = 3 must divide model.num_heads = 8", NULL}},
        {{"model.hidden_size=100", "model.num_heads=8"},
         {"model.hidden_size = 100 is not divisible by model.num_heads = 8", "head_dim"}},
        {{"model.head_dim=15"}, {"head width is 15", "even"}},
        {{"model.hidden_size=24", "model.num_heads=8", "model.num_kv_heads=2"},
         {"head width is 3", "even"}},
        {{"model.top_k=9"}, {"model.top_k = 9 must not exceed model.num_experts = 8", NULL}},
        {{"train.seq_length=9000"},
         {"train.seq_length = 9000 exceeds model.max_position_embeddings = 8192", NULL}},
        {{"parallel.ep=3"}, {"parallel.ep = 3 must divide model.num_experts = 8", NULL}},
        {{"checkpoint.resume_from_checkpoint=true"},
         {"checkpoint.resume_from_checkpoint is true", "checkpoint.ckpt_dir is empty"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config_defaults(&cfg);
        for (int j = 0; j < 3 && cases[i].overrides[j]; j++)
            CHECK_MSG(config_apply_override(&cfg, cases[i].overrides[j], &e) == 0, "%s",
                      e.msg);
        e.msg[0] = '\0';
        CHECK_MSG(config_validate(&cfg, &e) == -1, "case %zu should fail", i);
        for (int j = 0; j < 2 && cases[i].needle[j]; j++)
            CHECK_MSG(has(&e, cases[i].needle[j]), "case %zu lacks \"%s\": %s", i,
                      cases[i].needle[j], e.msg);
    }

    /* the boundaries themselves are fine */
    config_defaults(&cfg);
    const char *edge[] = {"model.top_k=8", "train.seq_length=8192", "scheduler.warmup_steps=20000",
                          "parallel.ep=8", "scheduler.min_lr_ratio=1", "data.reverse_complement=1",
                          "scheduler.warmup_steps=0", "model.head_dim=2"};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        CHECK_MSG(config_apply_override(&cfg, edge[i], &e) == 0, "%s", e.msg);
    CHECK_MSG(config_validate(&cfg, &e) == 0, "%s", e.msg);

    /* ranges are checked on structs filled by code, too */
    config_defaults(&cfg);
    cfg.data.val_fraction = 1.0;
    CHECK_ERR(config_validate(&cfg, &e), e, "data.val_fraction = 1 is out of range", "[0, 1)");
    config_defaults(&cfg);
    cfg.data.n_files = 0;
    CHECK_ERR(config_validate(&cfg, &e), e, "data.files is empty");
    config_defaults(&cfg);
    cfg.optimizer.eps = 0;
    CHECK_ERR(config_validate(&cfg, &e), e, "optimizer.eps = 0 is out of range");
    config_defaults(&cfg);
    cfg.parallel.dp = -1;
    CHECK_ERR(config_validate(&cfg, &e), e, "parallel.dp = -1", "0..65536");
    config_defaults(&cfg);
    cfg.precision.compute = (moe_precision)42;
    CHECK_ERR(config_validate(&cfg, &e), e, "precision.compute = 42");
    config_defaults(&cfg);
    cfg.runtime.backend = (moe_backend_choice)3;
    CHECK_ERR(config_validate(&cfg, &e), e, "runtime.backend = 3");
    config_defaults(&cfg);
    cfg.optimizer.beta1 = -0.1;
    CHECK_ERR(config_validate(&cfg, &e), e, "optimizer.betas[0] = -0.1");

    /* config_load says where each key of a broken rule came from */
    write_file("experts.cfg", "model = {\n  num_experts = 6;\n};\n");
    char *ov[] = {"model.top_k=7"};
    CHECK_ERR(config_load(&cfg, write_file("experts.cfg", "model = {\n  num_experts = 6;\n};\n"),
                          NULL, 1, ov, &e),
              e, "config experts:", "model.top_k from override 'model.top_k=7'",
              "model.num_experts from ", "experts.cfg:2");
    CHECK_ERR(load_text(&cfg, "kv.cfg", "model = { num_kv_heads = 3; };\n", &e), e,
              "model.num_kv_heads from ", "kv.cfg:1", "model.num_heads from the built-in default");
}

/* ---- write and read back ---------------------------------------------- */

static void test_round_trip(void)
{
    moe_err e;
    char *ov[] = {
        "optimizer.lr=0.1",
        "model.rope_theta=3.141592653589793",
        "model.rms_norm_eps=1e-300",
        "model.init_std=0.021999999999999999",
        "optimizer.betas=0.1,0.30000000000000004",
        "train.seed=12345678901234567",
        "checkpoint.ckpt_dir=dir with \"quotes\", \\backslash\\ and\ttab",
        "logger.run_dir=runs/#not-a-comment",
        "checkpoint.init_from=/models/Mixtral-8x7B",
        "data.files=a.fa,b.fa,c.fa",
        "precision.compute=mxfp8_emulated",
        "runtime.threads=3",
    };
    const char *written = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/effective.cfg", tmp_dir);
    const char *names[] = {"L1_8x7B_ep", "L0_sanity", "defaults"};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        int nov = n == 0 ? (int)(sizeof ov / sizeof ov[0]) : 0;
        CHECK_MSG(config_load(&cfg, names[n], MOE_CONFIG_DIR_DEFAULT, nov, ov, &e) == 0, "%s",
                  e.msg);
        CHECK_MSG(config_save(&cfg, path, &e) == 0, "%s", e.msg);
        CHECK_MSG(config_load(&other, path, NULL, 0, NULL, &e) == 0, "reading back %s: %s",
                  names[n], e.msg);
        CHECK_MSG(same_settings(&cfg, &other), "%s does not round-trip", names[n]);
        CHECK(strcmp(other.name, "effective") == 0);
        written = path;
    }
    /* the values that matter survived exactly */
    CHECK(config_load(&cfg, "L1_8x7B_ep", MOE_CONFIG_DIR_DEFAULT, (int)(sizeof ov / sizeof ov[0]),
                      ov, &e) == 0);
    CHECK(config_save(&cfg, written, &e) == 0);
    CHECK(config_load(&other, written, NULL, 0, NULL, &e) == 0);
    CHECK(other.model.rms_norm_eps == 1e-300 && other.optimizer.beta2 == 0.30000000000000004);
    CHECK(other.train.seed == 12345678901234567ULL);
    CHECK(strcmp(other.checkpoint.ckpt_dir, "dir with \"quotes\", \\backslash\\ and\ttab") == 0);
    CHECK(strcmp(other.logger.run_dir, "runs/#not-a-comment") == 0);

    /* the file is documented and self-contained */
    FILE *f = fopen(written, "r");
    char text[16384] = "";
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = '\0';
        fclose(f);
    }
    CHECK(strstr(text, "of L1_8x7B_ep") && !strstr(text, "base ="));
    CHECK(strstr(text, "# peak learning rate (AdamW)\n  lr = 0.1;"));
    CHECK(strstr(text, "seed = 12345678901234567L;"));
    CHECK(strstr(text, "rope_theta = 3.141592653589793;"));
    CHECK(strstr(text, "vocab_size = 256;"));
    CHECK(strstr(text, "grad_clip = 1.0;"));

    /* no temporary file is left beside it */
    CHECK(count_prefixed(tmp_dir, "effective.cfg.") == 0);
}

/* Devices and symlinks are written through, never replaced by a file. */
static void test_write_in_place(void)
{
    moe_err e;
    CHECK(config_load(&cfg, "L0_sanity", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e) == 0);
    struct stat st;
    CHECK_MSG(config_save(&cfg, "/dev/null", &e) == 0, "%s", e.msg);
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));

    char target[600], link_path[600];
    snprintf(target, sizeof target, "%s/target.cfg", tmp_dir);
    snprintf(link_path, sizeof link_path, "%s/link.cfg", tmp_dir);
    write_file("target.cfg", "# placeholder\n");
    CHECK(symlink(target, link_path) == 0);
    CHECK_MSG(config_save(&cfg, link_path, &e) == 0, "%s", e.msg);
    CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_MSG(config_load(&other, target, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(same_settings(&cfg, &other));
}

static void test_write_errors(void)
{
    moe_err e;
    config_defaults(&cfg);
    cfg.model.top_k = 99;
    char path[600];
    snprintf(path, sizeof path, "%s/invalid.cfg", tmp_dir);
    CHECK_ERR(config_save(&cfg, path, &e), e, "not writing an invalid config", "invalid.cfg",
              "model.top_k = 99");
    CHECK(access(path, F_OK) != 0);
    config_defaults(&cfg);
    snprintf(path, sizeof path, "%s/no/such/dir/out.cfg", tmp_dir);
    CHECK_ERR(config_save(&cfg, path, &e), e, "cannot create", "no/such/dir",
              "No such file");
}

/* ---- finding configs by name ------------------------------------------ */

static void test_name_lookup(void)
{
    moe_err e;
    char dir[400], path[MOE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/lookup", tmp_dir);
    mkdir(dir, 0755);
    write_file("lookup/tiny.cfg", "model = { num_layers = 1; };\n");
    write_file("lookup/tiny_long.cfg", "model = { num_layers = 2; };\n");
    write_file("lookup/notes.txt", "not a config\n");

    CHECK(config_load(&cfg, "tiny", dir, 0, NULL, &e) == 0 && cfg.model.num_layers == 1);
    CHECK(strcmp(cfg.name, "tiny") == 0 && strstr(cfg.path, "lookup/tiny.cfg"));
    /* "name.cfg" that is not in the working directory is found in the dir */
    CHECK(config_load(&cfg, "tiny_long.cfg", dir, 0, NULL, &e) == 0 &&
          cfg.model.num_layers == 2);
    CHECK(config_resolve_path("tiny", dir, path, sizeof path, &e) == 0);
    CHECK(strstr(path, "lookup/tiny.cfg") != NULL);

    /* no dir given: $MOE_CONFIG_DIR, else the built-in one */
    setenv("MOE_CONFIG_DIR", dir, 1);
    CHECK(config_load(&cfg, "tiny", NULL, 0, NULL, &e) == 0 && cfg.model.num_layers == 1);
    CHECK_ERR(config_load(&cfg, "L0_sanity", NULL, 0, NULL, &e), e, "not found", dir);
    unsetenv("MOE_CONFIG_DIR");
    CHECK_MSG(config_load(&cfg, "L0_sanity", NULL, 0, NULL, &e) == 0, "%s", e.msg);

    CHECK_ERR(config_load(&cfg, "tinny", dir, 0, NULL, &e), e, "config 'tinny' not found",
              dir, "did you mean 'tiny'", "available: tiny, tiny_long");
    CHECK_MSG(!has(&e, "notes"), "%s", e.msg);
    CHECK_ERR(config_load(&cfg, "L0_sanit", MOE_CONFIG_DIR_DEFAULT, 0, NULL, &e), e,
              "did you mean 'L0_sanity'", "L1_8x7B_ep", "bench_8x7B_2L_genomic", "defaults");
    CHECK_ERR(config_load(&cfg, "tiny", "/nonexistent/configs", 0, NULL, &e), e,
              "cannot open the config directory /nonexistent/configs", "MOE_CONFIG_DIR");
}

/* ---- helpers ---------------------------------------------------------- */

static void test_suggestions(void)
{
    CHECK(edit_distance("kitten", "sitting") == 3);
    CHECK(edit_distance("", "abc") == 3 && edit_distance("abc", "abc") == 0);
    const char *words[] = {"hidden_size", "num_heads", "top_k"};
    CHECK(closest_word("hiden_size", words, 3) == words[0]);
    CHECK(closest_word("num_head", words, 3) == words[1]);
    CHECK(closest_word("xyz", words, 3) == NULL);
    CHECK(closest_word("ab", words, 3) == NULL);
}

static void test_source_check(void)
{
    moe_err e;
    CHECK(config_source_check("f", "a = 2147483647; b = -2147483648; c = 0xFFFFFFFF;", &e) == 0);
    CHECK(config_source_check("f", "a = 9223372036854775807L; b = 1e300; c = 3000000000.0;",
                              &e) == 0);
    CHECK(config_source_check("f", "name_12345678901 = 1; s = \"12345678901 \\\" 99999999999\";",
                              &e) == 0);
    CHECK_ERR(config_source_check("f", "a = 1;\nb = 2147483648;", &e), e, "f:2",
              "2147483648 does not fit in 32 bits");
    CHECK_ERR(config_source_check("f", "a = -2147483649;", &e), e, "-2147483649");
    CHECK_ERR(config_source_check("f", "a = 0x1FFFFFFFF;", &e), e, "0x1FFFFFFFF");
    CHECK_ERR(config_source_check("f", "a = 0x1FFFFFFFFFFFFFFFFL;", &e), e, "64 bits");
    CHECK_ERR(config_source_check("f", "/* 1\n2 */\n@include \"x\"", &e), e, "f:3", "@include");
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* The runtime switches: keys with their defaults, validated, and the old
 * environment variables read as those keys under the command line. */
/* The closed choices a saved config (a run's config.cfg, a checkpoint's)
 * holds as words load into the schema's enums, and are written back as the
 * same words. */
static void test_saved_choices(void)
{
    moe_config cfg, other;
    moe_err e = {{0}};
    CHECK_MSG(load_text(&cfg, "saved.cfg",
                        "optimizer = { moments_dtype = \"bf16\"; };\n"
                        "data = { pack = \"padded\"; };\n"
                        "precision = { layers = \"all\"; };\n"
                        "runtime = { backend = \"cpu\"; };\n",
                        &e) == 0,
              "%s", e.msg);
    CHECK(cfg.optimizer.moments_dtype == MOE_MOMENTS_DTYPE_BF16 &&
          cfg.data.pack == MOE_PACK_PADDED && cfg.precision.layers == MOE_LAYERS_ALL &&
          cfg.runtime.backend == MOE_BACKEND_CPU);
    char path[600];
    snprintf(path, sizeof path, "%s/saved_again.cfg", tmp_dir);
    CHECK_MSG(config_save(&cfg, path, &e) == 0, "%s", e.msg);
    FILE *f = fopen(path, "r");
    char text[16384] = "";
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
    }
    CHECK(strstr(text, "moments_dtype = \"bf16\";") && strstr(text, "pack = \"padded\";") &&
          strstr(text, "layers = \"all\";") && strstr(text, "backend = \"cpu\";"));
    CHECK_MSG(config_load(&other, path, NULL, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(other.optimizer.moments_dtype == cfg.optimizer.moments_dtype &&
          other.data.pack == cfg.data.pack && other.precision.layers == cfg.precision.layers &&
          other.runtime.backend == cfg.runtime.backend);
    /* every word of every table, as a file and as an override */
    const struct {
        const char *key;
        const char *const *names;
        const int *field;
    } keys[] = {
        {"optimizer.moments_dtype", config_moments_dtype_names, (const int *)&cfg.optimizer.moments_dtype},
        {"data.pack", config_pack_names, (const int *)&cfg.data.pack},
        {"precision.layers", config_layers_names, (const int *)&cfg.precision.layers},
        {"runtime.backend", config_backend_names, (const int *)&cfg.runtime.backend},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        for (int i = 0; keys[k].names[i]; i++) {
            char ov[96];
            snprintf(ov, sizeof ov, "%s=%s", keys[k].key, keys[k].names[i]);
            config_defaults(&cfg);
            CHECK_MSG(config_apply_override(&cfg, ov, &e) == 0 && *keys[k].field == i, "%s: %s",
                      ov, e.msg);
        }
    /* a word that is none of them: the allowed values and a suggestion */
    CHECK_ERR(load_text(&cfg, "saved.cfg", "optimizer = { moments_dtype = \"bf61\"; };\n", &e),
              e, "optimizer.moments_dtype: 'bf61' is not one of fp32, bf16",
              "did you mean 'bf16'?");
    CHECK_ERR(load_text(&cfg, "saved.cfg", "data = { pack = 3; };\n", &e), e, "data.pack",
              "a string");
}

static void test_runtime_switches(void)
{
    moe_config cfg;
    moe_err e = {{0}};
    CHECK_MSG(load_text(&cfg, "rt.cfg", "", &e) == 0, "%s", e.msg);
    int mask = -1;
    CHECK(config_fp8_gemms_mask(cfg.runtime.fp8_gemms, &mask, &e) == 0 &&
          mask == (MOE_FP8_FPROP | MOE_FP8_DGRAD | MOE_FP8_WGRAD));
    CHECK(config_fp8_gemms_mask("none", &mask, &e) == 0 && mask == 0);
    CHECK(config_fp8_gemms_mask("wgrad,fprop", &mask, &e) == 0 &&
          mask == (MOE_FP8_FPROP | MOE_FP8_WGRAD));
    /* the backend starts from the schema's defaults, not a copy of its own */
    CHECK(backend_opts_default().expert_chunk_rows == cfg.runtime.expert_chunk_rows &&
          backend_opts_default().fp8_chunk_rows == cfg.runtime.fp8_chunk_rows);
    CHECK(cfg.runtime.fp8_chunk_rows == 8192 && cfg.runtime.expert_chunk_rows == 8192 &&
          cfg.runtime.fp8_fused_save == 1 &&
          cfg.runtime.gemm == MOE_RT_GEMM_CUBLASLT && cfg.runtime.attention == MOE_RT_ATTN_CUDNN &&
          cfg.runtime.init_on == MOE_RT_INIT_DEVICE);
    char *bad_list[] = {"runtime.fp8_gemms=fprop,wgard"};
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, bad_list, &e), e,
              "'wgard' is not one of fprop, dgrad, wgrad, none", "runtime.fp8_gemms from");
    char *bad_rows[] = {"runtime.fp8_chunk_rows=200"};
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, bad_rows, &e), e,
              "multiple of 128");
    char *bad_chunk[] = {"runtime.expert_chunk_rows=1000"};
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, bad_chunk, &e), e,
              "runtime.expert_chunk_rows = 1000 must be a multiple of 128");
    char *bad_attn[] = {"runtime.attention=flash"};
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, bad_attn, &e), e,
              "runtime.attention", "simt");

    setenv("MOE_FP8_FUSED_SAVE", "0", 1);
    setenv("MOE_CUDA_ATTENTION", "wmma", 1);
    char *over[] = {"runtime.attention=simt"};
    CHECK(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, over, &e) == 0);
    CHECK(cfg.runtime.fp8_fused_save == 0);
    CHECK_MSG(cfg.runtime.attention == MOE_RT_ATTN_SIMT, "the command line wins over the env");
    setenv("MOE_INIT_ON", "cpu", 1);
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 0, NULL, &e), e,
              "environment MOE_INIT_ON", "runtime.init_on");
    unsetenv("MOE_FP8_FUSED_SAVE");
    unsetenv("MOE_CUDA_ATTENTION");
    unsetenv("MOE_INIT_ON");

    /* the cuDNN library and MPI's message size are keys; their old variables
     * are read as them, the command line still wins */
    CHECK(config_load(&cfg, write_file("rt.cfg", ""), NULL, 0, NULL, &e) == 0);
    CHECK(cfg.runtime.cudnn_lib[0] == '\0' && cfg.parallel.mpi_max_count == 0);
    char *keys[] = {"runtime.cudnn_lib=/opt/cudnn/libcudnn_graph.so.9", "parallel.mpi_max_count=7"};
    CHECK(config_load(&cfg, write_file("rt.cfg", ""), NULL, 2, keys, &e) == 0);
    CHECK(!strcmp(cfg.runtime.cudnn_lib, "/opt/cudnn/libcudnn_graph.so.9") &&
          cfg.parallel.mpi_max_count == 7);
    setenv("MOE_CUDNN_LIB", "/site/libcudnn.so.9", 1);
    setenv("MOE_MPI_MAX_COUNT", "5", 1);
    CHECK(config_load(&cfg, write_file("rt.cfg", ""), NULL, 0, NULL, &e) == 0);
    CHECK(!strcmp(cfg.runtime.cudnn_lib, "/site/libcudnn.so.9") && cfg.parallel.mpi_max_count == 5);
    CHECK(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, keys + 1, &e) == 0);
    CHECK(cfg.parallel.mpi_max_count == 7);
    setenv("MOE_MPI_MAX_COUNT", "-1", 1);
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 0, NULL, &e), e,
              "environment MOE_MPI_MAX_COUNT", "parallel.mpi_max_count");
    unsetenv("MOE_CUDNN_LIB");
    unsetenv("MOE_MPI_MAX_COUNT");
    char *bad_count[] = {"parallel.mpi_max_count=-3"};
    CHECK_ERR(config_load(&cfg, write_file("rt.cfg", ""), NULL, 1, bad_count, &e), e,
              "parallel.mpi_max_count = -3 is out of range", ">= 0");
}

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "%s/moe_test_config.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    unsetenv("MOE_CONFIG_DIR");
    RUN(test_schema_table);
    RUN(test_precision_names);
    RUN(test_shipped_configs);
    RUN(test_defaults_file_is_complete);
    RUN(test_base_chain);
    RUN(test_base_errors);
    RUN(test_file_errors);
    RUN(test_file_values_accepted);
    RUN(test_store_and_blend);
    RUN(test_overrides);
    RUN(test_override_errors);
    RUN(test_validation_rules);
    RUN(test_round_trip);
    RUN(test_write_in_place);
    RUN(test_write_errors);
    RUN(test_name_lookup);
    RUN(test_suggestions);
    RUN(test_source_check);
    RUN(test_saved_choices);
    RUN(test_runtime_switches);
    nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return check_summary("test_config");
}
