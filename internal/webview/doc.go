// Package webview is the browser's view of a namespace server: a
// directory page (sizes, owners' names, dates, checksums; download,
// upload, mkdir and delete forms) and, for the admin role, a status page
// that refreshes itself. It renders with html/template (contextual
// auto-escaping) and an embedded style sheet: no script, no build step.
//
// It presents and guards; it never decides. The HTTP front end
// (httpfront) authenticates the viewer, asks the namespace service
// (nsserver) for what to show and to do, the very calls curl's requests
// become, and hands the answers to Render*. What webview owns is the
// browser's session: a random id in an HttpOnly, SameSite=Strict cookie
// (Secure over https) that may keep a pasted bearer token server side,
// and the CSRF token bound to that session which every form must carry.
// Every page carries a Content-Security-Policy that allows nothing but
// the page's own style sheet and forms posting to itself.
package webview
