/*
 * ferry/folder.h - the classes of an image folder, and what reading it left out.
 *
 * "files:DIR" and "images:DIR" read a folder as torchvision's ImageFolder does
 * (torchvision.datasets.folder: find_classes, make_dataset):
 *  - the classes are the directories directly in DIR (hidden ones too, symbolic
 *    links followed), sorted by name; class k has label k;
 *  - a class's samples are the files under its directory, at any depth: the
 *    directories taken in the order of their sorted paths, the files of each
 *    sorted by name; with ext= only the files whose extension is listed (in any
 *    case); without it, every file but hidden ones;
 *  - files directly in DIR are not samples: they are counted here;
 *  - a class with no file is an error that names it (it would take a label and
 *    shift the later ones), and so is a DIR without any class directory;
 *  - a symbolic link to nothing (with an accepted extension) is listed, as
 *    torchvision lists it, and reading it is an error that says so: the skip
 *    policy can leave it out; it is counted here.
 * So sample i and its label are those of torchvision's ImageFolder(DIR)[i] for
 * the same extensions. "folder=flat" instead reads every (non-hidden) file under
 * DIR by path, with label -1: a folder without classes.
 *
 * The answers below are valid for the dataset's life; they are the folder's for a
 * dataset over one (images:DIR, ferry_dataset_images over files:DIR) too.
 */
#ifndef FERRY_FOLDER_H
#define FERRY_FOLDER_H

#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of classes (labels 0 .. n-1); 0 for a dataset that is not over a folder,
 * or for folder=flat. */
FERRY_API uint64_t ferry_folder_nclasses(const ferry_dataset *ds);

/* The directory name of class `label`; NULL out of range. */
FERRY_API const char *ferry_folder_class_name(const ferry_dataset *ds, uint64_t label);

/* What reading the folder left out, or could not read. */
typedef struct ferry_folder_report {
    uint64_t root_files;       /* entries directly in DIR that are not directories */
    uint64_t filtered;         /* files without an extension listed in ext= */
    uint64_t hidden;           /* hidden files (no ext= given), hidden directories (flat) */
    uint64_t other;            /* neither files nor directories (FIFOs, sockets, ...) */
    uint64_t dangling;         /* symbolic links to nothing, listed as samples that fail */
    const char *first_ignored; /* the first entry left out (relative to DIR), or NULL */
} ferry_folder_report;

/* Fills *out. FERRY_EINVAL for a dataset that is not over a folder. */
FERRY_API int ferry_folder_get_report(const ferry_dataset *ds, ferry_folder_report *out);

#ifdef __cplusplus
}
#endif
#endif /* FERRY_FOLDER_H */
